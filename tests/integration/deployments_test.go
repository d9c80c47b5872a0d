package integration

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestDeploymentCLI: the operator CLI against each backend — create,
// show, list, state, delete with --json; bad ids, unknown pools, taken ids
// and a stopped deployment's way back are refused; bad ids never resolve.
func TestDeploymentCLI(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServerless(t, b, "pool gpu builtin {\n\t\t\tconcurrency 1\n\t\t}", "")
			var d deployment
			s.mustCLI(t, &d, "create", "acme-prod", "--account", "acme", "--pool", "gpu")
			if d != (deployment{ID: "acme-prod", Account: "acme", Pool: "gpu", State: "provisioning"}) {
				t.Errorf("create = %+v", d)
			}
			s.mustCLI(t, &d, "create", "demo", "--account", "demo-account", "--public")
			if d.Pool != "builtin" || !d.Public {
				t.Errorf("create --public with the default pool = %+v", d)
			}
			for _, bad := range []struct {
				name string
				args []string
			}{
				{"upper case", []string{"create", "Acme", "--account", "a"}},
				{"64 characters", []string{"create", strings.Repeat("a", 62) + "bc", "--account", "a"}},
				{"leading hyphen", []string{"create", "-x", "--account", "a"}},
				{"trailing hyphen", []string{"create", "x-", "--account", "a"}},
				{"dots", []string{"create", "..", "--account", "a"}},
				{"empty", []string{"create", "", "--account", "a"}},
				{"no account", []string{"create", "x1"}},
				{"unknown pool", []string{"create", "x2", "--account", "a", "--pool", "nope"}},
				{"taken id", []string{"create", "acme-prod", "--account", "other"}},
				{"unknown state", []string{"state", "acme-prod", "paused"}},
				{"unknown deployment", []string{"state", "nope", "ready"}},
				{"bad id to show", []string{"show", "Acme"}},
			} {
				if out, stderr, err := s.cli(t, bad.args...); err == nil {
					t.Errorf("%s: accepted (%s%s)", bad.name, out, stderr)
				}
			}
			var list []deployment
			s.mustCLI(t, &list, "list")
			if len(list) != 2 || list[0].ID != "acme-prod" || list[1].ID != "demo" {
				t.Fatalf("list = %+v; the refused creates must leave nothing", list)
			}
			s.mustCLI(t, &list, "list", "--account", "acme")
			if len(list) != 1 {
				t.Errorf("list --account acme = %+v", list)
			}
			for _, st := range []string{"starting", "ready", "stopped"} {
				s.setState(t, "acme-prod", st)
			}
			if _, _, err := s.cli(t, "state", "acme-prod", "ready"); err == nil {
				t.Error("a stopped deployment went back to ready")
			}
			s.mustCLI(t, &d, "show", "acme-prod")
			if d.State != "stopped" {
				t.Errorf("show = %+v", d)
			}
			if out, stderr, err := s.cli(t, "delete", "acme-prod"); err != nil {
				t.Fatalf("delete: %v %s %s", err, out, stderr)
			}
			if _, _, err := s.cli(t, "show", "acme-prod"); err == nil {
				t.Error("show after delete succeeded")
			}
			s.create(t, "acme-prod", "acme", "gpu", false, "ready") // re-created after the delete

			// Bad ids never resolve, by prefix or by host, whoever asks.
			key := s.key(t, "acme")
			for _, id := range []string{"Acme-Prod", strings.Repeat("a", 64), "-x", "x-", "", "ACME-PROD"} {
				for name, c := range map[string]client{"prefix": s.byPrefix(id, key), "host": s.byHost(id, key)} {
					if name == "host" && (id == "" || strings.ToLower(id) == "acme-prod") {
						continue // host names are case-insensitive: checked below
					}
					r := c.do(t, http.MethodGet, "/api/v2/jobs", nil, nil)
					wantError(t, name+" "+id, r, http.StatusNotFound, "not_found", false)
				}
			}
			r := s.byPrefix("..", key).do(t, http.MethodGet, "/api/v2/jobs", nil, nil)
			if r.Status != http.StatusNotFound {
				t.Errorf("/deployment/../api/v2/jobs: %d %s", r.Status, r.Body)
			}
			// The host is case-insensitive: ACME-PROD.run.example.test is acme-prod.
			if r := s.byHost("ACME-PROD", key).do(t, http.MethodGet, "/api/v2/jobs", nil, nil); r.Status != http.StatusOK {
				t.Errorf("upper-case host: %d %s", r.Status, r.Body)
			}
		})
	}
}

// TestDeploymentStates walks one deployment through provisioning →
// starting → ready → stopped and checks upload, submit, get, list, events
// and cancel in each state; another account's deployment and an unknown
// id answer exactly alike in every state.
func TestDeploymentStates(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := startServerless(t, b, "pool solo builtin {\n\t\t\tconcurrency 1\n\t\t}", "")
			s.create(t, "walk", "acme", "solo", false, "provisioning")
			s.create(t, "theirs", "globex", "solo", false, "provisioning")
			acme := s.key(t, "acme")
			c := s.byPrefix("walk", acme)
			img := pngOf(t)
			placeholder := uuid.NewString()

			type call struct {
				name string
				do   func(job string) response
			}
			calls := []call{
				{"upload", func(string) response { return c.upload(t, img, "in.png") }},
				{"submit", func(string) response { return c.submit(t, invertWorkflow("in.png")) }},
				{"get", func(job string) response { return c.get(t, job) }},
				{"list", func(string) response { return c.do(t, http.MethodGet, "/api/v2/jobs", nil, nil) }},
				{"events", func(job string) response { return c.do(t, http.MethodGet, "/api/v2/jobs/"+job+"/events", nil, nil) }},
				{"cancel", func(job string) response { return c.do(t, http.MethodPost, "/api/v2/jobs/"+job+"/cancel", nil, nil) }},
			}
			same := func(state string) {
				// another account's deployment vs an id that never existed
				for _, id := range []string{"theirs", "never-was"} {
					r := s.byPrefix(id, acme).do(t, http.MethodGet, "/api/v2/jobs", nil, nil)
					wantError(t, state+": "+id, r, http.StatusNotFound, "not_found", false)
					var env struct {
						Error map[string]any `json:"error"`
					}
					_ = json.Unmarshal(r.Body, &env)
					if env.Error["message"] != "no such deployment" {
						t.Errorf("%s: %s answered %s", state, id, r.Body)
					}
				}
				theirs := s.byPrefix("theirs", acme).submit(t, invertWorkflow("in.png"))
				unknown := s.byPrefix("never-was", acme).submit(t, invertWorkflow("in.png"))
				if theirs.Status != unknown.Status || !bytes.Equal(theirs.Body, unknown.Body) {
					t.Errorf("%s: another account's deployment %d %s, unknown %d %s", state, theirs.Status, theirs.Body, unknown.Status, unknown.Body)
				}
			}

			for _, state := range []string{"provisioning", "starting"} {
				s.setState(t, "walk", state)
				s.setState(t, "theirs", state)
				for _, cl := range calls {
					wantError(t, state+" "+cl.name, cl.do(placeholder), http.StatusTooManyRequests, "deployment_not_ready", true)
				}
				same(state)
			}

			s.setState(t, "walk", "ready")
			s.setState(t, "theirs", "ready")
			if r := calls[0].do(""); r.Status != http.StatusCreated {
				t.Fatalf("ready upload: %d %s", r.Status, r.Body)
			}
			sub := calls[1].do("")
			if sub.Status != http.StatusCreated {
				t.Fatalf("ready submit: %d %s", sub.Status, sub.Body)
			}
			done := jobID(t, sub)
			c.wait(t, done, func(s string) bool { return s == "succeeded" })
			if r := calls[2].do(done); r.Status != http.StatusOK {
				t.Errorf("ready get: %d", r.Status)
			}
			if r := calls[3].do(""); r.Status != http.StatusOK || len(r.JSON(t)["jobs"].([]any)) != 1 {
				t.Errorf("ready list: %d %s", r.Status, r.Body)
			}
			if r := calls[4].do(done); r.Status != http.StatusOK || !strings.Contains(string(r.Body), "event: status") {
				t.Errorf("ready events: %d %s", r.Status, r.Body)
			}
			if r := calls[5].do(done); r.Status != http.StatusOK {
				t.Errorf("ready cancel of a finished job: %d %s", r.Status, r.Body)
			}
			same("ready")

			// Stopping cancels the running and the queued job through the
			// ordinary transitions; both end canceled.
			running := jobID(t, c.submit(t, slowWorkflow(40)))
			c.wait(t, running, func(s string) bool { return s == "running" })
			queued := jobID(t, c.submit(t, slowWorkflow(40)))
			s.setState(t, "walk", "stopped")
			s.setState(t, "theirs", "stopped")
			for _, cl := range calls {
				wantError(t, "stopped "+cl.name, cl.do(done), http.StatusUnprocessableEntity, "deployment_stopped", false)
			}
			same("stopped")
			// The jobs stay in storage; the account sees them on the cloud surface.
			cloud := client{base: s.cloudURL, key: acme}
			for _, id := range []string{running, queued} {
				j := cloud.wait(t, id, func(s string) bool { return s == "canceled" })
				if hasLogs(t, j) {
					t.Errorf("the cloud surface returned a run log: %v", j["logs"])
				}
			}
			if r := cloud.get(t, done); r.Status != http.StatusOK {
				t.Errorf("the stopped deployment's finished job on the cloud surface: %d", r.Status)
			}
		})
	}
}

// TestDeploymentByHost: the SDK's flow (see tests/sdk) addressed by host,
// as curl -H 'Host: <id>.run.example.test' sends it: upload, run the
// invert graph, stream its events, download the output by the link the
// job carries. Links are absolute on the deployment's host, with no path
// prefix; the deployment lists only its own jobs.
func TestDeploymentByHost(t *testing.T) {
	s := startServerless(t, backends()[1], "", "")
	s.create(t, "acme-web", "acme", "", false, "ready")
	s.create(t, "acme-other", "acme", "", false, "ready")
	key := s.key(t, "acme")
	c := s.byHost("acme-web", key)
	img := pngOf(t)
	up := c.upload(t, img, "photo.png")
	if up.Status != http.StatusCreated {
		t.Fatalf("upload: %d %s", up.Status, up.Body)
	}
	assetURL := up.JSON(t)["url"].(string)
	if !strings.HasPrefix(assetURL, "http://acme-web.run.example.test/api/v2/assets/") {
		t.Errorf("asset url %s", assetURL)
	}
	id := jobID(t, c.submit(t, invertWorkflow("photo.png")))
	stream := c.do(t, http.MethodGet, "/api/v2/jobs/"+id+"/events", nil, nil)
	if !strings.Contains(string(stream.Body), "event: output") || !strings.Contains(string(stream.Body), `"status":"succeeded"`) {
		t.Fatalf("stream: %s", stream.Body)
	}
	j := c.wait(t, id, gateway.Terminal)
	urls := j["urls"].(map[string]any)
	if urls["self"] != "http://acme-web.run.example.test/api/v2/jobs/"+id {
		t.Errorf("urls = %v", urls)
	}
	out := j["outputs"].([]any)[0].(map[string]any)["url"].(string)
	// Follow the link as a client resolving the host to the gateway.
	follow := client{base: s.URL, host: "acme-web.run.example.test", key: key}
	path := strings.TrimPrefix(out, "http://acme-web.run.example.test")
	got := follow.do(t, http.MethodGet, path, nil, nil)
	if got.Status != http.StatusOK || got.Header.Get("Content-Type") != "image/png" || len(got.Body) == 0 {
		t.Errorf("download %s: %d %s", out, got.Status, got.Header.Get("Content-Type"))
	}
	// Another deployment of the same account sees neither the job nor it listed.
	other := s.byHost("acme-other", key)
	wantError(t, "the job through another deployment", other.get(t, id), http.StatusNotFound, "not_found", false)
	if r := other.do(t, http.MethodGet, "/api/v2/jobs", nil, nil); len(r.JSON(t)["jobs"].([]any)) != 0 {
		t.Errorf("another deployment lists %s", r.Body)
	}
	if r := c.do(t, http.MethodGet, "/api/v2/jobs", nil, nil); len(r.JSON(t)["jobs"].([]any)) != 1 {
		t.Errorf("the deployment lists %s", r.Body)
	}
	// A request to the serverless site that names no deployment.
	wantError(t, "no deployment named", response{gateway.Do(t, http.MethodGet, s.URL+"/api/v2/jobs", nil,
		map[string]string{"Authorization": "Bearer " + key})}, http.StatusNotFound, "not_found", false)
}

// TestDeploymentHostAndPrefix: a request whose host names one deployment
// and whose path starts with another's /deployment/{id} prefix is refused
// (404 not_found, nothing created in either), whichever of the two the
// caller owns; the host with its own id as prefix is served, the prefix
// stripped and kept in every link.
func TestDeploymentHostAndPrefix(t *testing.T) {
	s := startServerless(t, backends()[1], "", "")
	s.create(t, "acme-a", "acme", "", false, "ready")
	s.create(t, "acme-b", "acme", "", false, "ready")
	key := s.key(t, "acme")
	hostA := func(prefix string) client {
		return client{base: s.URL + prefix, host: "acme-a.run.example.test", key: key}
	}

	crossed := hostA("/deployment/acme-b")
	wantError(t, "list, host acme-a, prefix acme-b", crossed.do(t, http.MethodGet, "/api/v2/jobs", nil, nil),
		http.StatusNotFound, "not_found", false)
	wantError(t, "upload, host acme-a, prefix acme-b", crossed.upload(t, pngOf(t), "photo.png"),
		http.StatusNotFound, "not_found", false)
	wantError(t, "submit, host acme-a, prefix acme-b", crossed.submit(t, invertWorkflow("photo.png")),
		http.StatusNotFound, "not_found", false)
	for _, c := range []client{s.byHost("acme-a", key), s.byHost("acme-b", key)} {
		if r := c.do(t, http.MethodGet, "/api/v2/jobs", nil, nil); r.Status != http.StatusOK || len(r.JSON(t)["jobs"].([]any)) != 0 {
			t.Errorf("%s after the refused requests: %d %s", c.host, r.Status, r.Body)
		}
	}

	// The host's own id as prefix: served as acme-a, links keep the prefix.
	own := hostA("/deployment/acme-a")
	base := "http://acme-a.run.example.test/deployment/acme-a/api/v2/"
	up := own.upload(t, pngOf(t), "photo.png")
	if up.Status != http.StatusCreated {
		t.Fatalf("upload, host acme-a, prefix acme-a: %d %s", up.Status, up.Body)
	}
	if u := up.JSON(t)["url"].(string); !strings.HasPrefix(u, base+"assets/") {
		t.Errorf("asset url %s, want under %s", u, base)
	}
	id := jobID(t, own.submit(t, invertWorkflow("photo.png")))
	j := own.wait(t, id, gateway.Terminal)
	if j["status"] != "succeeded" {
		t.Fatalf("job %v: %v", j["status"], j["error"])
	}
	if self := j["urls"].(map[string]any)["self"]; self != base+"jobs/"+id {
		t.Errorf("urls.self = %v, want %s", self, base+"jobs/"+id)
	}
	out := j["outputs"].([]any)[0].(map[string]any)["url"].(string)
	got := client{base: s.URL, host: "acme-a.run.example.test", key: key}.do(t, http.MethodGet,
		strings.TrimPrefix(out, "http://acme-a.run.example.test"), nil, nil)
	if !strings.HasPrefix(out, base) || got.Status != http.StatusOK || got.Header.Get("Content-Type") != "image/png" {
		t.Errorf("output %s: %d %s", out, got.Status, got.Header.Get("Content-Type"))
	}
	if r := s.byHost("acme-a", key).get(t, id); r.Status != http.StatusOK {
		t.Errorf("the job by host alone: %d %s", r.Status, r.Body)
	}
	wantError(t, "the job through the other deployment", s.byHost("acme-b", key).get(t, id), http.StatusNotFound, "not_found", false)

	// The deployment a request names is the one in the path Caddy's
	// matchers see cleaned: a dot segment named acme-a while a rule for
	// /deployment/acme-b/* matched (found by a black-box review), and
	// segments between the prefix and /api/v2 were copied into every link.
	plain := client{base: s.URL, key: key}
	for _, path := range []string{
		"/deployment/acme-a/../acme-b/api/v2/jobs/" + id,
		"/deployment/acme-a/./api/v2/jobs/" + id,
		"/deployment/acme-a//api/v2/jobs/" + id,
		"/deployment/acme-a/garbage/api/v2/jobs/" + id,
		"/deployment/acme-a/deployment/acme-b/api/v2/jobs/" + id,
	} {
		wantError(t, path, plain.do(t, http.MethodGet, path, nil, nil), http.StatusNotFound, "not_found", false)
	}
	wantError(t, "junk before /api/v2 by host", s.byHost("acme-a", key).do(t, http.MethodGet, "/garbage/api/v2/jobs/"+id, nil, nil),
		http.StatusNotFound, "not_found", false)
	if r := plain.do(t, http.MethodGet, "/deployment/acme-a/api/v2/jobs/"+id, nil, nil); r.Status != http.StatusOK {
		t.Errorf("the job by prefix: %d %s", r.Status, r.Body)
	}
}
