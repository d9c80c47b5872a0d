package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/tests/gateway"
)

// deploymentDomains are the base domains of the test serverless sites.
const deploymentDomains = "run.example.test stg.run.example.test"

// serverless is a gateway with a deployment site on its port and a cloud
// site (api_keys, no deployment) on cloudPort, sharing one comfygate app.
type serverless struct {
	*gateway.Gateway
	cloudURL string
	cfgPath  string
	// dsn is the Postgres the gateway uses; "" on the embedded backend.
	dsn string
}

// serverlessConfig is the Caddyfile of a serverless gateway: global is the
// comfygate option body, demo the comfy_deployment demo block body.
func serverlessConfig(global, demo string, cloudPort int) string {
	return `{
	admin off
	grace_period 1s
	comfygate {
		` + global + `
	}
}

(v2) {
	idempotency
	comfy_assets
	comfy_jobs
	error "not found" 404
}

http://:{PORT} {
	bind 127.0.0.1
	route {
		error_envelope
		comfy_deployment {
			domains ` + deploymentDomains + `
			retry_after 3s
			demo {
				` + demo + `
			}
		}
		comfy_auth api_keys
		import v2
	}
}

http://:` + fmt.Sprint(cloudPort) + ` {
	bind 127.0.0.1
	route {
		error_envelope
		comfy_auth api_keys
		import v2
	}
}
`
}

// startServerless runs a serverless gateway on backend b with extra
// comfygate options (pools, jobs block) and demo caps.
func startServerless(t *testing.T, b backend, extra, demo string) *serverless {
	t.Helper()
	dir := t.TempDir()
	cloudPort := gateway.FreePort(t)
	global := b.global(t, dir)
	var dsn string
	if strings.HasPrefix(global, "storage postgres ") {
		if _, err := fmt.Sscanf(strings.TrimPrefix(global, "storage postgres "), "%q", &dsn); err != nil {
			t.Fatal(err)
		}
	}
	// Two FreePort calls may return the same port (the first listener is
	// closed by then); the gateway's own port must differ from cloudPort.
	port := gateway.FreePort(t)
	for port == cloudPort {
		port = gateway.FreePort(t)
	}
	g := gateway.Start(t, serverlessConfig(global+"\n\t\t"+extra, demo, cloudPort), gateway.Options{Dir: dir, Port: port})
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	if len(cfgs) != 1 {
		t.Fatalf("want one Caddyfile in %s, have %v", g.Dir, cfgs)
	}
	return &serverless{Gateway: g, cloudURL: fmt.Sprintf("http://127.0.0.1:%d", cloudPort), cfgPath: cfgs[0], dsn: dsn}
}

// cli runs `comfygate deployment …` against the gateway's config.
func (s *serverless) cli(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	cmd := exec.Command(gateway.Binary(t), append([]string{"deployment", "--config", s.cfgPath, "--adapter", "caddyfile"}, args...)...)
	cmd.Dir = s.Dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err = cmd.Run()
	return out.String(), errb.String(), err
}

// mustCLI runs the CLI with --json and decodes its answer into v (if set).
func (s *serverless) mustCLI(t *testing.T, v any, args ...string) {
	t.Helper()
	out, stderr, err := s.cli(t, append([]string{"--json"}, args...)...)
	if err != nil {
		t.Fatalf("deployment %v: %v\n%s", args, err, stderr)
	}
	if v != nil {
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("deployment %v printed %q: %v", args, out, err)
		}
	}
}

// deployment is the CLI's --json form.
type deployment struct {
	ID      string `json:"id"`
	Account string `json:"account"`
	Pool    string `json:"pool"`
	Public  bool   `json:"public"`
	State   string `json:"state"`
}

// create records a deployment and moves it to state.
func (s *serverless) create(t *testing.T, id, account, pool string, public bool, state string) {
	t.Helper()
	args := []string{"create", id, "--account", account}
	if pool != "" {
		args = append(args, "--pool", pool)
	}
	if public {
		args = append(args, "--public")
	}
	s.mustCLI(t, nil, args...)
	if state != "provisioning" {
		s.setState(t, id, state)
	}
}

func (s *serverless) setState(t *testing.T, id, state string) {
	t.Helper()
	var d deployment
	s.mustCLI(t, &d, "state", id, state)
	if d.State != state {
		t.Fatalf("state %s → %+v", state, d)
	}
}

// key mints an API key for account.
func (s *serverless) key(t *testing.T, account string) string {
	t.Helper()
	return createKey(t, s.Gateway, account)
}

// client addresses one deployment, by prefix or by host.
type client struct {
	base string // scheme://host:port[/deployment/<id>]
	host string // Host header, for host addressing
	key  string
}

func (s *serverless) byPrefix(id, key string) client {
	return client{base: s.URL + "/deployment/" + id, key: key}
}

func (s *serverless) byHost(id, key string) client {
	return client{base: s.URL, host: id + ".run.example.test", key: key}
}

// do sends method to the client's base + path (which starts with /api/v2).
func (c client) do(t *testing.T, method, path string, body io.Reader, header map[string]string) response {
	t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if c.host != "" {
		req.Host = c.host
	}
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	r := response{gateway.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}}
	if r.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: response without X-Request-Id", method, path)
	}
	return r
}

func (c client) submit(t *testing.T, wf any) response {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	return c.do(t, http.MethodPost, "/api/v2/jobs", bytes.NewReader(raw), map[string]string{"Content-Type": "application/json"})
}

func (c client) upload(t *testing.T, data []byte, filePath string) response {
	t.Helper()
	body, ct := multipartBody(t, uploadParts(data, filePath)...)
	return c.do(t, http.MethodPost, "/api/v2/assets", body, map[string]string{"Content-Type": ct})
}

func (c client) get(t *testing.T, id string) response {
	t.Helper()
	return c.do(t, http.MethodGet, "/api/v2/jobs/"+id, nil, nil)
}

// wait polls the job until done(status), returning it.
func (c client) wait(t *testing.T, id string, done func(string) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		r := c.get(t, id)
		if r.Status != http.StatusOK {
			t.Fatalf("GET job %s: %d %s", id, r.Status, r.Body)
		}
		j := r.JSON(t)
		if done(j["status"].(string)) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s", id, j["status"])
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// wantError checks an error answer's status, code and Retry-After.
func wantError(t *testing.T, what string, r response, status int, code string, retryAfter bool) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: status %d, want %d (%s)", what, r.Status, status, r.Body)
		return
	}
	if got := r.errorCode(t); got != code {
		t.Errorf("%s: code %q, want %q", what, got, code)
	}
	if ra := r.Header.Get("Retry-After"); (ra != "") != retryAfter {
		t.Errorf("%s: Retry-After %q, want present %v", what, ra, retryAfter)
	}
}

// hasLogs reports whether a job object carries the "logs" key at all.
func hasLogs(t *testing.T, job map[string]any) bool {
	t.Helper()
	_, ok := job["logs"]
	return ok
}

// pngOf is a small test image.
func pngOf(t *testing.T) []byte { return gateway.GradientPNG(t, 32) }

func jobID(t *testing.T, r response) string {
	t.Helper()
	id, _ := r.JSON(t)["id"].(string)
	if id == "" {
		t.Fatalf("no job id in %d %s", r.Status, r.Body)
	}
	return id
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// store opens the gateway's Postgres storage (postgres backend only).
func (s *serverless) store(t *testing.T) *postgres.Store {
	t.Helper()
	if s.dsn == "" {
		t.Fatal("store needs the postgres backend")
	}
	st, err := postgres.Open(context.Background(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}
