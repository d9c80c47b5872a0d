package integration

import (
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// fairQueueMax is the pool's max_queued in the fair-queue tests.
const fairQueueMax = 200

// startFairQueue starts a gateway on backend b whose pool admits at most
// fairQueueMax queued jobs and runs none (no_execute: nothing drains, so
// the queue stays exactly as submitted), and returns it with a submit
// function for API-key headers.
func startFairQueue(t *testing.T, b backend) (*gateway.Gateway, func(h map[string]string) response) {
	dir := t.TempDir()
	global := b.global(t, dir) + fmt.Sprintf(`
		jobs {
			no_execute
			max_queued %d
		}`, fairQueueMax)
	g := gateway.Start(t, siteConfig(global, "comfy_auth api_keys"), gateway.Options{Dir: dir})
	work := map[string]any{"workflow": slowWorkflow(1)}
	return g, func(h map[string]string) response { return submit(t, g, work, h) }
}

// fillAlone has the account behind h submit from 16 clients until it is
// refused, and returns how many it got in.
func fillAlone(t *testing.T, send func(map[string]string) response, h map[string]string) int {
	t.Helper()
	var in atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				r := send(h)
				if r.Status == http.StatusTooManyRequests {
					return
				}
				if r.Status != http.StatusCreated {
					t.Errorf("filling: %d %s", r.Status, r.Body)
					return
				}
				in.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(in.Load())
}

// keepFull has R keep submitting (as a tenant holding the pool full
// would) until stop is closed, and counts R's answers by status and bound.
func keepFull(t *testing.T, send func(map[string]string) response, h map[string]string, stop <-chan struct{}) func() map[string]int {
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := send(h)
				mu.Lock()
				got[answerOf(t, r)]++
				mu.Unlock()
			}
		}()
	}
	return func() map[string]int { wg.Wait(); return got }
}

// answerOf is "created", or "429 <bound>", or the status.
func answerOf(t *testing.T, r response) string {
	switch r.Status {
	case http.StatusCreated:
		return "created"
	case http.StatusTooManyRequests:
		e, _ := r.JSON(t)["error"].(map[string]any)
		d, _ := e["details"].(map[string]any)
		if r.Header.Get("Retry-After") == "" || e["code"] != "queue_full" {
			t.Errorf("429 without queue_full and Retry-After: %s", r.Body)
		}
		return fmt.Sprintf("429 %v", d["bound"])
	}
	t.Errorf("submit: %d %s", r.Status, r.Body)
	return fmt.Sprint(r.Status)
}

// TestFairQueueTwoTenants (issue 38, acceptance 4): on a pool with
// max_queued 200, tenant R fills the queue and keeps submitting; tenant B's
// five submits meanwhile are all accepted, and R's are refused for its
// fair share. Both backends, real binary, over HTTP.
func TestFairQueueTwoTenants(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g, send := startFairQueue(t, b)
			auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
			r, bKey := auth(createKey(t, g, "tenant-r")), auth(createKey(t, g, "tenant-b"))
			if n := fillAlone(t, send, r); n != fairQueueMax {
				t.Fatalf("R alone got %d in, want max_queued (%d)", n, fairQueueMax)
			}
			stop := make(chan struct{})
			rAnswers := keepFull(t, send, r, stop)
			time.Sleep(50 * time.Millisecond) // R is submitting
			refused := 0
			var took []time.Duration
			for i := range 5 {
				start := time.Now()
				resp := send(bKey)
				took = append(took, time.Since(start))
				if a := answerOf(t, resp); a != "created" {
					refused++
					t.Errorf("B's submit %d while R keeps the pool full: %s %s", i+1, a, resp.Body)
				}
			}
			close(stop)
			got := rAnswers()
			slices.Sort(took)
			t.Logf("%s: B refused %d of 5 (submit latency median %v, max %v); R meanwhile: %v",
				b.name, refused, took[2], took[4], got)
			if got["created"] != 0 || got["429 fair_share"] == 0 {
				t.Errorf("R's submits while B queues: %v, want every one refused for its fair share", got)
			}
		})
	}
}

// TestFairQueueFiftyTenants: R fills the pool (max_queued 200) and keeps
// submitting; 49 more tenants each submit five at once. Every tenant's
// first job gets in, R gets none more in, and the pool stays under its
// ceiling of 400. (How many of a tenant's later submits get in depends on
// how many accounts are queued when each arrives: the share is
// max_queued over them.)
func TestFairQueueFiftyTenants(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g, send := startFairQueue(t, b)
			auth := func(key string) map[string]string { return map[string]string{"Authorization": "Bearer " + key} }
			r := auth(createKey(t, g, "tenant-r"))
			var tenants []map[string]string
			for i := range 49 {
				tenants = append(tenants, auth(createKey(t, g, fmt.Sprintf("tenant-%02d", i))))
			}
			if n := fillAlone(t, send, r); n != fairQueueMax {
				t.Fatalf("R alone got %d in, want %d", n, fairQueueMax)
			}
			stop := make(chan struct{})
			rAnswers := keepFull(t, send, r, stop)
			var (
				wg      sync.WaitGroup
				mu      sync.Mutex
				firsts  int
				in      = make([]int, len(tenants))
				answers = map[string]int{}
				took    []time.Duration
			)
			for i, h := range tenants {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for k := range 5 {
						start := time.Now()
						a := answerOf(t, send(h))
						mu.Lock()
						took = append(took, time.Since(start))
						answers[a]++
						if a == "created" {
							in[i]++
							if k == 0 {
								firsts++
							}
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			close(stop)
			got := rAnswers()
			total := fairQueueMax
			for i, n := range in {
				total += n
				if n < 1 {
					t.Errorf("tenant %d got none of its 5 in", i)
				}
			}
			slices.Sort(took)
			t.Logf("%s: 49 tenants x 5 submits: first jobs in %d of 49; answers %v; queued %d (ceiling %d); "+
				"submit latency median %v, p99 %v; R meanwhile: %v", b.name, firsts, answers, total, 2*fairQueueMax,
				took[len(took)/2], took[len(took)*99/100], got)
			if total > 2*fairQueueMax {
				t.Errorf("%d queued, over the ceiling of %d", total, 2*fairQueueMax)
			}
			if firsts != 49 {
				t.Errorf("only %d of 49 tenants' first submits got in", firsts)
			}
			if got["created"] != 0 {
				t.Errorf("R got %d more in while 49 tenants queued", got["created"])
			}
		})
	}
}
