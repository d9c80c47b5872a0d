package tracing

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestAccessLogPlaceholders (issue 30, acceptance 3): an access log whose
// log_append lines and a deferred header directive name
// {comfygate.account}, {comfygate.job_id} and {comfygate.deployment}
// names the account and the job each request served, on the v2 API and on
// ComfyUI's (POST /prompt, GET /history/<id>). A request that sets neither
// (a 401) is logged with both fields null and the header's placeholder
// text unchanged, as docs/observability.md says (issue 40).
func TestAccessLogPlaceholders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	cfg := `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
	}
}
http://:{PORT} {
	bind 127.0.0.1
	log {
		output file ` + accessLog + `
		format json
	}
	log_append account {comfygate.account}
	log_append job_id {comfygate.job_id}
	header {
		defer
		X-Comfygate-Account {comfygate.account}
		X-Comfygate-Job {comfygate.job_id}
	}
	route {
		error_envelope
		comfy_auth api_keys
		idempotency
		comfy_assets
		comfy_jobs
		comfy_native
		error "not found" 404
	}
}
`
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
	key := gateway.CreateAPIKey(t, g, "acct-tracing")
	auth := map[string]string{"Authorization": "Bearer " + key}

	wf := map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "p", "images": []any{"1", 0}}),
	}
	body, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(body), auth)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if got := r.Header.Get("X-Comfygate-Account"); got != "acct-tracing" {
		t.Errorf("X-Comfygate-Account = %q, want acct-tracing", got)
	}
	if got := r.Header.Get("X-Comfygate-Job"); got != id {
		t.Errorf("X-Comfygate-Job = %q, want %s", got, id)
	}
	if g := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+id, nil, auth); g.Status != http.StatusOK {
		t.Fatalf("get: %d %s", g.Status, g.Body)
	}

	// The same workflow as a ComfyUI prompt: its prompt_id is the job's id.
	body, _ = json.Marshal(map[string]any{"prompt": wf})
	p := gateway.Do(t, http.MethodPost, g.URL+"/prompt", bytes.NewReader(body), auth)
	if p.Status != http.StatusOK {
		t.Fatalf("POST /prompt: %d %s", p.Status, p.Body)
	}
	promptID := p.JSON(t)["prompt_id"].(string)
	if got := p.Header.Get("X-Comfygate-Job"); got != promptID {
		t.Errorf("POST /prompt: X-Comfygate-Job = %q, want %s", got, promptID)
	}
	if h := gateway.Do(t, http.MethodGet, g.URL+"/history/"+promptID, nil, auth); h.Status != http.StatusOK {
		t.Fatalf("GET /history: %d %s", h.Status, h.Body)
	} else if got := h.Header.Get("X-Comfygate-Job"); got != promptID {
		t.Errorf("GET /history/<id>: X-Comfygate-Job = %q, want %s", got, promptID)
	}

	// Nothing sets the placeholders on a request refused before comfy_auth
	// knew an account.
	anon := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/jobs", nil, nil)
	if anon.Status != http.StatusUnauthorized {
		t.Fatalf("unauthenticated: %d %s", anon.Status, anon.Body)
	}
	if got := anon.Header.Get("X-Comfygate-Account"); got != "{comfygate.account}" {
		t.Errorf("401: X-Comfygate-Account = %q, want the placeholder's text unchanged", got)
	}

	// Each request's access log line names the account and its job; the
	// 401's has both fields, null.
	want := map[string]int{id: 2, promptID: 2}
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := readAccessLog(t, accessLog)
		named, unset := map[string]int{}, 0
		for _, l := range lines {
			if job, ok := l["job_id"].(string); ok && l["account"] == "acct-tracing" {
				named[job]++
			}
			req, _ := l["request"].(map[string]any)
			if l["status"] == float64(http.StatusUnauthorized) && req["uri"] == "/api/v2/jobs" &&
				isNull(l, "account") && isNull(l, "job_id") {
				unset++
			}
		}
		if named[id] >= want[id] && named[promptID] >= want[promptID] && unset == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want access log lines naming account acct-tracing: 2 for job %s and 2 for prompt %s, and one 401 with "+
				"both fields null; got %v and %d of %d lines:\n%v", id, promptID, named, unset, len(lines), lines)
		}
		time.Sleep(100 * time.Millisecond)
	}
	docs, err := os.ReadFile(filepath.Join(gateway.RepoRoot(t), "docs", "observability.md"))
	if err != nil {
		t.Fatal(err)
	}
	if claim := "`\"account\": null, \"job_id\": null`"; !bytes.Contains(docs, []byte(claim)) {
		t.Errorf("docs/observability.md no longer shows what the log writes for unset placeholders (%s)", claim)
	}
}

// isNull reports whether the log line has the field key, as JSON null.
func isNull(line map[string]any, key string) bool {
	v, ok := line[key]
	return ok && v == nil
}

func readAccessLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
