package metrics

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

const jwtSecret = "metrics-test-secret-0123456789abcdef"

// site serves the v2 API (no auth, one built-in slot) and the model router
// on one port, with Caddy's admin endpoint (and so /metrics) at {ADMIN}.
func site(catalog string) string {
	return `{
	admin {ADMIN}
	grace_period 1s
	comfygate {
		storage embedded ./data
		max_upload_size 1MiB
		jobs {
			concurrency 1
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/*
	route @router {
		error_envelope router
		comfy_auth jwt {
			key HS256 secret ` + jwtSecret + `
		}
		model_router {
			catalog ` + catalog + `
			allow_insecure_upstreams
			max_in_flight 1
		}
	}
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
}

// TestSeriesMoveExactly: a scripted run — uploads stored, deduplicated and
// refused (413); jobs that succeed, fail, are
// canceled queued and running; a refused key, an unknown job, an invalid
// workflow; an event stream; router calls answered, failed by the partner,
// refused by the concurrency limit, for an unknown model and for a body
// that is not JSON — moves every
// comfygate_ series by exactly what it did, and nothing else moves.
func TestSeriesMoveExactly(t *testing.T) {
	t.Parallel()
	slow := partner.NewSyncJSON(t, partner.WithLatency(1500*time.Millisecond))
	ok := partner.NewSyncJSON(t)
	failing := partner.NewSyncJSON(t, partner.WithStatus(http.StatusInternalServerError))
	dir := t.TempDir()
	catalog := filepath.Join(dir, "catalog.json")
	writeCatalog(t, catalog, map[string]string{"acme/ok": ok.URL, "acme/slow": slow.URL, "acme/down": failing.URL})
	g, admin := startGateway(t, site(catalog), gateway.Options{Dir: dir})
	before := scrapeAt(t, admin)

	// Uploads: new bytes, the same bytes again (a dedup hit), too many.
	broken := []byte("not an image at all")
	upload(t, g, broken, "broken.png", http.StatusCreated)
	upload(t, g, broken, "again.png", http.StatusOK)
	upload(t, g, bytes.Repeat([]byte("x"), 2<<20), "big.png", http.StatusRequestEntityTooLarge)

	// Jobs: a blocker runs while the next ones queue behind it.
	blocker := submit(t, g, gateway.BlurWorkflow(8), "")
	waitStatus(t, g, blocker, "running")
	queuedCancel := submit(t, g, gateway.BlurWorkflow(1), "")
	failed := submit(t, g, loadWorkflow("broken.png"), "key-1")
	if r := post(t, g.URL+"/api/v2/jobs", map[string]any{"workflow": loadWorkflow("broken.png")}, "key-1"); r.Status != 422 {
		t.Errorf("reused key: %d %s", r.Status, r.Body)
	}
	if r := post(t, g.URL+"/api/v2/jobs", map[string]any{"workflow": map[string]any{"1": map[string]any{"class_type": "Nope", "inputs": map[string]any{}}}}, ""); r.Status != 422 {
		t.Errorf("invalid workflow: %d %s", r.Status, r.Body)
	}
	if r := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/jobs/00000000-0000-4000-8000-000000000000", nil, nil); r.Status != 404 {
		t.Errorf("unknown job: %d", r.Status)
	}
	stream := openStream(t, g, blocker)
	waitGauge(t, admin, "comfygate_event_streams_open", 1)
	stream.Close()
	waitGauge(t, admin, "comfygate_event_streams_open", 0)
	cancel(t, g, queuedCancel)
	cancel(t, g, blocker)
	waitStatus(t, g, blocker, "canceled")
	waitStatus(t, g, failed, "failed")
	succeeded := submit(t, g, map[string]any{"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "m", "images": []any{"1", 0}})}, "")
	waitStatus(t, g, succeeded, "succeeded")

	// Router: answered, partner failure, a call refused while another of
	// the workspace's is in flight (max_in_flight 1), an unknown model.
	tok := token(t, "ws-metrics")
	if r := routerCall(t, g, "acme/ok", tok); r.Status != 200 {
		t.Errorf("ok call: %d %s", r.Status, r.Body)
	}
	if r := routerCall(t, g, "acme/down", tok); r.Status != http.StatusBadGateway {
		t.Errorf("partner failure: %d %s", r.Status, r.Body)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r := routerCall(t, g, "acme/slow", tok); r.Status != 200 {
			t.Errorf("slow call: %d %s", r.Status, r.Body)
		}
	}()
	for slow.InFlight() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if r := routerCall(t, g, "acme/ok", tok); r.Status != http.StatusTooManyRequests {
		t.Errorf("over the in-flight limit: %d %s", r.Status, r.Body)
	}
	wg.Wait()
	if r := routerCall(t, g, "acme/nope", tok); r.Status != http.StatusNotFound {
		t.Errorf("unknown model: %d %s", r.Status, r.Body)
	}
	if r := gateway.Do(t, http.MethodPost, g.URL+"/v1/models/acme/ok", strings.NewReader(`{"prompt":`),
		map[string]string{"Authorization": "Bearer " + tok}); r.Status != http.StatusBadRequest {
		t.Errorf("a body that is not JSON: %d %s", r.Status, r.Body)
	}

	after := scrapeAt(t, admin)
	checkChanges(t, before, after, []change{
		{"comfygate_jobs_submitted_total", []string{"pool=builtin"}, 4},
		{"comfygate_jobs_finished_total", []string{"pool=builtin", "status=succeeded"}, 1},
		{"comfygate_jobs_finished_total", []string{"pool=builtin", "status=failed"}, 1},
		{"comfygate_jobs_finished_total", []string{"pool=builtin", "status=canceled"}, 2},
		// Started jobs: the blocker, the failed one, the succeeded one.
		{"comfygate_job_queue_wait_seconds", []string{"pool=builtin"}, 3},
		{"comfygate_job_execution_seconds", []string{"pool=builtin"}, 3},
		{"comfygate_job_execution_seconds", []string{"pool=builtin", "status=canceled"}, 1},
		{"comfygate_idempotency_key_reuses_total", []string{"route=jobs"}, 1},
		{"comfygate_uploads_total", []string{"outcome=stored"}, 1},
		{"comfygate_uploads_total", []string{"outcome=deduplicated"}, 1},
		{"comfygate_upload_bytes_total", nil, float64(2 * len(broken))},
		{"comfygate_upload_duration_seconds", nil, 2},
		{"comfygate_upload_refusals_total", []string{"code=payload_too_large"}, 1},
		{"comfygate_upload_refusals_total", nil, 1},
		{"comfygate_error_responses_total", []string{"code=payload_too_large"}, 1},
		{"comfygate_error_responses_total", []string{"code=idempotency_key_reuse"}, 1},
		{"comfygate_error_responses_total", []string{"code=invalid_workflow"}, 1},
		{"comfygate_error_responses_total", []string{"code=not_found"}, 1},
		{"comfygate_error_responses_total", []string{"code=concurrency_limit_exceeded"}, 1},
		{"comfygate_error_responses_total", []string{"code=model_not_found"}, 1},
		{"comfygate_error_responses_total", []string{"code=invalid_input"}, 1},
		{"comfygate_error_responses_total", nil, 7},
		{"comfygate_router_calls_total", []string{"provider=acme", "bucket=ok"}, 2},
		{"comfygate_router_calls_total", []string{"provider=acme", "bucket=provider_error"}, 1},
		{"comfygate_router_calls_total", []string{"provider=acme", "bucket=concurrency_limit_exceeded"}, 1},
		{"comfygate_router_calls_total", []string{"provider=none", "bucket=model_not_found"}, 1},
		{"comfygate_router_calls_total", []string{"provider=acme", "bucket=invalid_input"}, 1},
		{"comfygate_router_call_duration_seconds", nil, 6},
		{"comfygate_router_limit_refusals_total", []string{"reason=in_flight"}, 1},
		// Three admitted calls at 7 cents; the partner's failure is not charged.
		{"comfygate_router_spend_reserved_cents_total", nil, 21},
		{"comfygate_router_spend_settled_cents_total", nil, 14},
		// The stream opened and closed again.
		{"comfygate_event_streams_open", nil, 0},
	})
}

// TestQueueDepthAgreesAcrossGateways: two gateways on one Postgres (neither
// runs jobs) report the queue depth that storage has, whichever took the
// submissions.
func TestQueueDepthAgreesAcrossGateways(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	cfg := `{
	admin {ADMIN}
	grace_period 1s
	comfygate {
		storage postgres "` + dsn + `"
		blobs file_system ./data/blobs
		jobs {
			no_execute
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	route {
		error_envelope
		comfy_auth none
		comfy_jobs
	}
}
`
	a, adminA := startGateway(t, cfg, gateway.Options{})
	_, adminB := startGateway(t, cfg, gateway.Options{})
	for range 7 {
		submit(t, a, map[string]any{"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
			"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "q", "images": []any{"1", 0}})}, "")
	}
	for _, admin := range []string{adminA, adminB} {
		s := scrapeAt(t, admin)
		if q, r := s.value("comfygate_jobs_queued", "pool=builtin"), s.value("comfygate_jobs_running", "pool=builtin"); q != 7 || r != 0 {
			t.Errorf("gateway with admin %s: queued %v, running %v; want 7 and 0", admin, q, r)
		}
		if s.value("comfygate_state_read_ok") != 1 {
			t.Errorf("gateway with admin %s could not read the counts", admin)
		}
	}
}

func writeCatalog(t *testing.T, path string, upstreams map[string]string) {
	t.Helper()
	var models []map[string]any
	for id, u := range upstreams {
		models = append(models, map[string]any{"id": id, "adapter": "http", "upstream": u + "/v1/images/generations",
			"credential": partner.DefaultSecret, "price_cents": 7, "billing": map[string]any{"charges_on_policy_rejection": "no"}})
	}
	b, _ := json.Marshal(map[string]any{"models": models})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func token(t *testing.T, ws string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"workspace_id": ws,
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func routerCall(t *testing.T, g *gateway.Gateway, model, tok string) gateway.Response {
	t.Helper()
	return gateway.Do(t, http.MethodPost, g.URL+"/v1/models/"+model, strings.NewReader(`{"prompt":"a red fox"}`),
		map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
}

func loadWorkflow(image string) map[string]any {
	return map[string]any{
		"1": gateway.Node("LoadImage", map[string]any{"image": image}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "m", "images": []any{"1", 0}}),
	}
}

func post(t *testing.T, url string, body any, key string) gateway.Response {
	t.Helper()
	raw, _ := json.Marshal(body)
	h := map[string]string{"Content-Type": "application/json"}
	if key != "" {
		h["Idempotency-Key"] = key
	}
	return gateway.Do(t, http.MethodPost, url, bytes.NewReader(raw), h)
}

func submit(t *testing.T, g *gateway.Gateway, wf map[string]any, key string) string {
	t.Helper()
	r := post(t, g.URL+"/api/v2/jobs", map[string]any{"workflow": wf}, key)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func cancel(t *testing.T, g *gateway.Gateway, id string) {
	t.Helper()
	if r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
}

func waitStatus(t *testing.T, g *gateway.Gateway, id, want string) {
	t.Helper()
	gateway.WaitJob(t, g.URL, id, time.Minute, func(s string) bool { return s == want || gateway.Terminal(s) })
}

func upload(t *testing.T, g *gateway.Gateway, data []byte, name string, want int) {
	t.Helper()
	if r := gateway.Upload(t, http.DefaultClient, g.URL, data, name, "image/png", nil); r.Status != want {
		t.Fatalf("upload %s: %d %s", name, r.Status, r.Body)
	}
}

// openStream opens a job's event stream and returns once its first event
// arrived; closing it hangs up.
func openStream(t *testing.T, g *gateway.Gateway, id string) interface{ Close() error } {
	t.Helper()
	resp, err := http.Get(g.URL + "/api/v2/jobs/" + id + "/events")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("events: %v %v", resp, err)
	}
	if _, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	return resp.Body
}

func waitGauge(t *testing.T, admin, name string, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := scrapeAt(t, admin).value(name)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is %v, want %v", name, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
