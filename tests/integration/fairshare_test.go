package integration

import (
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestFairShareThroughTheGateway (issue 14, acceptance 4): on a one-slot
// pool, account A queues 500 jobs, then account B submits one; B's job
// starts before two more of A's do. A's own queue bound (account_max_queued)
// refuses A only. Both backends, real binary, API keys.
func TestFairShareThroughTheGateway(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			global := b.global(t, dir) + `
		jobs {
			concurrency 1
			max_queued 100000
			account_max_queued 500
		}`
			g := gateway.Start(t, siteConfig(global, "comfy_auth api_keys"), gateway.Options{Dir: dir})
			auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
			a, bKey := auth(createKey(t, g, "acct-a")), auth(createKey(t, g, "acct-b"))
			work := map[string]any{"workflow": slowWorkflow(1)}

			// A fills its queue: 500 queued (plus what starts meanwhile),
			// then one more is refused for A alone.
			var wg sync.WaitGroup
			var mu sync.Mutex
			created := 0
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						mu.Lock()
						if created >= 500 {
							mu.Unlock()
							return
						}
						created++
						mu.Unlock()
						if r := submit(t, g, work, a); r.Status != http.StatusCreated {
							t.Errorf("A's submit: %d %s", r.Status, r.Body)
							return
						}
					}
				}()
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			refused := false
			for range 10 { // jobs that started meanwhile left room
				r := submit(t, g, work, a)
				if r.Status == http.StatusTooManyRequests {
					if r.errorCode(t) != "queue_full" || r.Header.Get("Retry-After") == "" {
						t.Fatalf("A over its bound: %d %s (Retry-After %q)", r.Status, r.Body, r.Header.Get("Retry-After"))
					}
					refused = true
					break
				}
				if r.Status != http.StatusCreated {
					t.Fatalf("A's extra submit: %d %s", r.Status, r.Body)
				}
			}
			if !refused {
				t.Fatal("A was never refused over its account_max_queued of 500")
			}

			r := submit(t, g, work, bKey)
			if r.Status != http.StatusCreated {
				t.Fatalf("B's submit while A's queue is full: %d %s", r.Status, r.Body)
			}
			bID := r.JSON(t)["id"].(string)
			bCreated, _ := time.Parse(time.RFC3339Nano, r.JSON(t)["created_at"].(string))
			if pos := r.JSON(t)["queue_position"]; pos != float64(2) {
				t.Errorf("B's queue position %v, want 2 (behind A's next job)", pos)
			}
			var bStarted time.Time
			for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
				j := do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+bID, nil, bKey).JSON(t)
				if s, ok := j["started_at"].(string); ok {
					bStarted, _ = time.Parse(time.RFC3339Nano, s)
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("B's job still %v after 60 s", j["status"])
				}
			}
			// A's jobs that started before B's job did, beyond those that
			// had started when B submitted: at most one.
			before, after := 0, 0
			for _, st := range []string{"running", "succeeded"} {
				for _, j := range listJobs(t, g, a, st) {
					s, _ := time.Parse(time.RFC3339Nano, j["started_at"].(string))
					if s.Before(bCreated) {
						before++
					}
					if s.Before(bStarted) {
						after++
					}
				}
			}
			t.Logf("A: %d jobs started when B submitted, %d when B's job started", before, after)
			if after-before > 1 {
				t.Fatalf("%d more of A's jobs started before B's single job, want at most 1", after-before)
			}
		})
	}
}

// listJobs lists every job of the caller with status (all pages).
func listJobs(t *testing.T, g *gateway.Gateway, header map[string]string, status string) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for {
		url := fmt.Sprintf("%s/api/v2/jobs?status=%s&limit=100", g.URL, status)
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		page := do(t, http.MethodGet, url, nil, header).JSON(t)
		for _, j := range page["jobs"].([]any) {
			out = append(out, j.(map[string]any))
		}
		next, ok := page["next_cursor"].(string)
		if !ok || next == "" {
			return out
		}
		cursor = next
	}
}
