package integration

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
)

// demoCaps are the comfy_deployment demo caps of the demo test.
const demoCaps = `max_queued 2
				max_upload_size 1KiB
				max_streams 1
				submits 6 1m`

// TestDeploymentDemo: a public deployment takes callers with no
// credential, and only it does; its queue, stream and upload caps and its
// per-address submit rate hold; its jobs' run logs are stored but never
// returned.
func TestDeploymentDemo(t *testing.T) {
	b := backends()[1] // postgres: the test reads the stored log back
	s := startServerless(t, b, `pool demo builtin {
			concurrency 1
		}
		pool demo2 builtin {
			concurrency 1
		}`, demoCaps)
	s.create(t, "demo-a", "demo", "demo", true, "ready")
	s.create(t, "demo-b", "demo", "demo2", true, "ready")
	s.create(t, "acme-1", "acme", "demo", false, "ready")
	anon := s.byPrefix("demo-a", "")

	// No credential: accepted on the demo, by prefix and by host, and with
	// a bogus one too (the demo does not look); refused everywhere else.
	unknownJob := "/api/v2/jobs/00000000-0000-4000-8000-000000000000"
	for name, c := range map[string]client{"prefix": anon, "host": s.byHost("demo-a", ""), "bogus key": s.byPrefix("demo-a", "cgk_bogus_key")} {
		wantError(t, "demo, "+name, c.do(t, http.MethodGet, unknownJob, nil, nil), http.StatusNotFound, "not_found", false)
	}
	// Every anonymous caller is the demo account, so the demo lists nothing.
	wantError(t, "demo listing", anon.do(t, http.MethodGet, "/api/v2/jobs", nil, nil), http.StatusForbidden, "forbidden", false)
	for name, c := range map[string]client{
		"private deployment": s.byPrefix("acme-1", ""), "private by host": s.byHost("acme-1", ""),
		"unknown deployment": s.byPrefix("nobody-here", ""), "cloud surface": {base: s.cloudURL},
	} {
		wantError(t, name, c.do(t, http.MethodGet, unknownJob, nil, nil), http.StatusUnauthorized, "unauthorized", false)
	}

	// Queue cap: one running, two queued, the next refused.
	var ids []string
	for i := range 3 {
		r := anon.submit(t, slowWorkflow(3))
		if r.Status != http.StatusCreated {
			t.Fatalf("demo submit %d: %d %s", i, r.Status, r.Body)
		}
		ids = append(ids, jobID(t, r))
		if i == 0 {
			anon.wait(t, ids[0], func(s string) bool { return s == "running" })
		}
	}
	wantError(t, "demo over its queue cap", anon.submit(t, slowWorkflow(3)), http.StatusTooManyRequests, "queue_full", true)

	// Stream cap: one stream open on the running job, the next refused.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, anon.base+"/api/v2/jobs/"+ids[0]+"/events", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first demo stream: %v %v", err, resp)
	}
	line, _ := bufio.NewReader(resp.Body).ReadString('\n') // the stream is open
	if !strings.HasPrefix(line, "event:") {
		t.Fatalf("first demo stream began with %q", line)
	}
	wantError(t, "second demo stream", anon.do(t, http.MethodGet, "/api/v2/jobs/"+ids[0]+"/events", nil, nil),
		http.StatusTooManyRequests, "too_many_streams", true)
	cancel()
	resp.Body.Close()

	// Upload cap: over it the body is refused as too large.
	wantError(t, "demo upload over its cap", anon.upload(t, randomBytes(2048), "big.bin"), http.StatusRequestEntityTooLarge, "payload_too_large", false)

	// The running job ends; the queued ones are canceled (not a submit).
	for _, id := range ids[1:] {
		if r := anon.do(t, http.MethodPost, "/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
			t.Errorf("cancel %s: %d", id, r.Status)
		}
	}
	j := anon.wait(t, ids[0], func(s string) bool { return s == "succeeded" })
	if hasLogs(t, j) {
		t.Errorf("a demo job's GET carries a run log: %v", j["logs"])
	}
	l, ok, err := s.store(t).GetJobLog(context.Background(), "demo", ids[0])
	if err != nil || !ok || !strings.Contains(l.Text, "got prompt") {
		t.Errorf("the demo job's run log is not stored: ok %v %v %q", ok, err, l.Text)
	}

	// Submit rate per client address: six submissions (uploads here) a
	// minute on demo-b, then 429 with Retry-After; reads go on.
	b2 := s.byPrefix("demo-b", "")
	for i := range 6 {
		if r := b2.upload(t, []byte("tiny"), "t.bin"); r.Status != http.StatusCreated && r.Status != http.StatusOK {
			t.Fatalf("demo-b upload %d: %d %s", i, r.Status, r.Body)
		}
	}
	r := b2.upload(t, []byte("tiny"), "t.bin")
	wantError(t, "demo over its submit rate", r, http.StatusTooManyRequests, "rate_limited", true)
	if ra := r.Header.Get("Retry-After"); ra == "0" {
		t.Errorf("Retry-After %q", ra)
	}
	wantError(t, "submit over the rate", b2.submit(t, slowWorkflow(1)), http.StatusTooManyRequests, "rate_limited", true)
	if r := b2.get(t, ids[0]); r.Status != http.StatusNotFound {
		t.Errorf("a read over the submit rate (another demo's job): %d", r.Status)
	}
	if r := anon.get(t, ids[0]); r.Status != http.StatusOK {
		t.Errorf("a read of the demo's job: %d", r.Status)
	}
	// Everything the demo took belongs to the demo account.
	demoKey := s.key(t, "demo")
	cloud := client{base: s.cloudURL, key: demoKey}
	if r := cloud.get(t, ids[0]); r.Status != http.StatusOK {
		t.Errorf("the demo account does not own the demo job: %d", r.Status)
	}
}
