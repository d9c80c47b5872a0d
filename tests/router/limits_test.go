package router

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestConcurrentCallsStayWithinLimits fires 200 concurrent calls from each
// of two workspaces at a gateway with max_in_flight 5 and a spend ceiling of
// 30 cents: workspace "cheap" (1 cent a call) is bound by the call count,
// workspace "dear" (10 cents) by the spend ceiling. Each has its own peer, so
// the peer's MaxInFlight is that workspace's true concurrency.
func TestConcurrentCallsStayWithinLimits(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			cheapPeer := partner.NewSyncJSON(t, partner.WithLatency(150*time.Millisecond))
			dearPeer := partner.NewSyncJSON(t, partner.WithLatency(150*time.Millisecond))
			models := []model{
				{ID: "acme/cheap", Adapter: "http", Upstream: cheapPeer.URL, Credential: partner.DefaultSecret, Price: 1, Deadline: "20s"},
				{ID: "acme/dear", Adapter: "http", Upstream: dearPeer.URL, Credential: partner.DefaultSecret, Price: 10, Deadline: "20s"},
			}
			g := startRouter(t, b, models, "max_in_flight 5\n\t\t\tspend_ceiling_cents 30")
			type result struct {
				ws string
				r  response
			}
			results := make(chan result, 400)
			var wg sync.WaitGroup
			for _, ws := range []string{"cheap", "dear"} {
				tok := token(t, claims{ws: "ws-" + ws + "-" + b.name})
				for range 200 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r, err := send(context.Background(), http.MethodPost, g.URL+"/v1/models/acme/"+ws, tok, prompt, nil)
						if err != nil {
							t.Errorf("%s: %v", ws, err)
							return
						}
						results <- result{ws, r}
					}()
				}
			}
			wg.Wait()
			close(results)
			ok := map[string]int{}
			refused := map[string]int{}
			for res := range results {
				r := res.r
				if r.Header.Get("X-Service-Request-Id") == "" {
					t.Errorf("response without X-Service-Request-Id")
				}
				switch r.Status {
				case 200:
					ok[res.ws]++
				case 429:
					refused[res.ws]++
					wantBucket(t, res.ws+" refusal", r, 429, "concurrency_limit_exceeded")
					checkSpendHeaders(t, res.ws, r)
				default:
					t.Errorf("%s: unexpected %d %s", res.ws, r.Status, r.Body)
				}
			}
			t.Logf("cheap: %d ok, %d refused, peer max in flight %d; dear: %d ok, %d refused, peer max in flight %d",
				ok["cheap"], refused["cheap"], cheapPeer.MaxInFlight(), ok["dear"], refused["dear"], dearPeer.MaxInFlight())
			if m := cheapPeer.MaxInFlight(); m > 5 || m < 1 {
				t.Errorf("cheap workspace reached %d calls in flight, limit 5", m)
			}
			if m := dearPeer.MaxInFlight(); m > 3 || m < 1 {
				t.Errorf("dear workspace committed %d × 10 cents in flight, ceiling 30", m)
			}
			if refused["cheap"] == 0 || refused["dear"] == 0 || ok["cheap"] == 0 || ok["dear"] == 0 {
				t.Errorf("expected both admissions and refusals in each workspace: ok %v refused %v", ok, refused)
			}
			checkCountersZero(t, g, b.name, []string{"ws-cheap-" + b.name, "ws-dear-" + b.name}, models)
		})
	}
}

// checkSpendHeaders: the cheap workspace is refused on the call count (no
// spend headers); the dear one on spend, with Current excluding the refused
// call and Remaining = max(0, Limit-Current).
func checkSpendHeaders(t *testing.T, ws string, r response) {
	t.Helper()
	lim, cur, rem := r.Header.Get("X-Committed-Spend-Limit"), r.Header.Get("X-Committed-Spend-Current"), r.Header.Get("X-Committed-Spend-Remaining")
	if ws == "cheap" {
		if lim != "" || cur != "" || rem != "" {
			t.Errorf("call-count refusal carries spend headers %q %q %q", lim, cur, rem)
		}
		return
	}
	l, e1 := strconv.ParseInt(lim, 10, 64)
	c, e2 := strconv.ParseInt(cur, 10, 64)
	m, e3 := strconv.ParseInt(rem, 10, 64)
	if e1 != nil || e2 != nil || e3 != nil {
		t.Errorf("spend refusal headers %q %q %q", lim, cur, rem)
		return
	}
	if l != 30 || c > l || c < 21 || m != max(0, l-c) {
		t.Errorf("spend headers limit %d current %d remaining %d: want limit 30, 21 <= current <= 30, remaining = max(0, limit-current)", l, c, m)
	}
}

// checkCountersZero: on Redis the limiter's own Inspect must read zero; on
// the embedded limiter (in the gateway's process) a full burst admitted
// afterwards shows no slot or cent leaked.
func checkCountersZero(t *testing.T, g *routerGateway, backend string, workspaces []string, models []model) {
	t.Helper()
	if backend == "postgres" {
		// Settlement runs just after the answer is sent, so allow it a moment.
		l := g.limiter(t)
		for _, ws := range workspaces {
			var n int
			var cents int64
			var err error
			eventually(t, 5*time.Second, ws+" counters back to zero", func() bool {
				n, cents, err = l.Inspect(context.Background(), ws)
				return err == nil && n == 0 && cents == 0
			})
		}
		return
	}
	// 5 cheap calls at once (the call limit) and 3 dear ones (30 cents).
	var wg sync.WaitGroup
	for i, ws := range workspaces {
		n := []int{5, 3}[i]
		tok := token(t, claims{ws: ws})
		id := models[i].ID
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := send(context.Background(), http.MethodPost, g.URL+"/v1/models/"+id, tok, prompt, nil)
				if err != nil || r.Status != 200 {
					t.Errorf("%s after the burst: %v %d %s (a leaked slot or cent?)", ws, err, r.Status, r.Body)
				}
			}()
		}
	}
	wg.Wait()
}

// TestKilledGatewayFreesLeases: kill -9 the gateway while calls are in
// flight; their leases expire within the TTL and a new gateway admits the
// workspace's full allowance again.
func TestKilledGatewayFreesLeases(t *testing.T) {
	b := postgresBackend()
	peer := partner.NewSyncJSON(t, partner.WithHang())
	models := []model{{ID: "acme/slow", Adapter: "http", Upstream: peer.URL, Credential: partner.DefaultSecret, Price: 2, Deadline: "1m"}}
	g := startRouter(t, b, models, "max_in_flight 3\n\t\t\tlease_ttl 1s")
	tok := token(t, claims{ws: "ws-kill"})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 3 {
		go send(ctx, http.MethodPost, g.URL+"/v1/models/acme/slow", tok, prompt, nil)
	}
	eventually(t, 10*time.Second, "three calls at the peer", func() bool { return peer.OpenRequests() == 3 })
	l := g.limiter(t)
	if n, cents, err := l.Inspect(context.Background(), "ws-kill"); err != nil || n != 3 || cents != 6 {
		t.Fatalf("before the kill: %d in flight, %d cents (%v), want 3 / 6", n, cents, err)
	}
	g.Kill()
	killed := time.Now()
	eventually(t, 5*time.Second, "leases to expire", func() bool {
		n, _, err := l.Inspect(context.Background(), "ws-kill")
		return err == nil && n == 0
	})
	t.Logf("leases gone %v after the kill (TTL 1s)", time.Since(killed).Round(10*time.Millisecond))
	_, cents, _ := l.Inspect(context.Background(), "ws-kill")
	if cents != 0 {
		t.Errorf("%d cents still committed after the leases expired", cents)
	}
	peer.SetOptions(partner.WithNoFaults())
	g2 := startRouter(t, backend{name: "postgres", global: func(*testing.T) (string, string, string) { return g.global, g.prefix, g.dsn }},
		models, "max_in_flight 3\n\t\t\tlease_ttl 1s")
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := send(context.Background(), http.MethodPost, g2.URL+"/v1/models/acme/slow", tok, prompt, nil)
			if err != nil || r.Status != 200 {
				t.Errorf("call %d after the restart: %v %d %s", i, err, r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
}

// TestNextCallNeverMeetsThePreviousLease: a client that waits for each
// answer before sending its next call is never refused, even with one call
// allowed in flight and its whole spend ceiling taken by one call: the
// previous call's lease is released before its answer is written. Another
// workspace keeps the limiter busy meanwhile, so releases and admissions
// share pipelines.
func TestNextCallNeverMeetsThePreviousLease(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			peer := partner.NewSyncJSON(t)
			models := []model{{ID: "acme/one", Adapter: "http", Upstream: peer.URL, Credential: partner.DefaultSecret, Price: 7, Deadline: "20s"}}
			g := startRouter(t, b, models, "max_in_flight 1\n\t\t\tspend_ceiling_cents 7")
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tok := token(t, claims{ws: fmt.Sprintf("ws-noise-%d-%s", i, b.name)})
					for ctx.Err() == nil {
						_, _ = send(ctx, http.MethodPost, g.URL+"/v1/models/acme/one", tok, prompt, nil)
					}
				}()
			}
			tok := token(t, claims{ws: "ws-serial-" + b.name})
			for i := range 300 {
				r, err := send(context.Background(), http.MethodPost, g.URL+"/v1/models/acme/one", tok, prompt, nil)
				if err != nil || r.Status != 200 {
					cancel()
					wg.Wait()
					t.Fatalf("call %d: %v %d %s", i, err, r.Status, r.Body)
				}
			}
			cancel()
			wg.Wait()
		})
	}
}
