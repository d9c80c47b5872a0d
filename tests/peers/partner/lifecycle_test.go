package partner

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"sync"
	"testing"
	"time"
)

const parallel = 50

func TestCountersUnderConcurrencySync(t *testing.T) {
	t.Parallel()
	for _, newPeer := range []func(testing.TB, ...Option) *Peer{NewSyncJSON, NewSyncBytes, NewConstant} {
		p := newPeer(t)
		var wg sync.WaitGroup
		errs := make(chan string, parallel)
		for range parallel {
			wg.Go(func() {
				r := call(t, p, http.MethodPost, p.URL+"/m", `{"prompt":"p","text":"t"}`)
				if r.err != nil || r.status != http.StatusOK {
					errs <- string(r.body)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Errorf("%s: call failed: %s", p.Kind, e)
		}
		if p.Submissions() != parallel || p.InFlight() != 0 || p.MaxInFlight() < 1 || p.MaxInFlight() > parallel {
			t.Fatalf("%s counters: subs %d inflight %d max %d", p.Kind, p.Submissions(), p.InFlight(), p.MaxInFlight())
		}
	}
}

// TestMaxInFlightExact holds 50 sync calls open at once and checks the peer
// saw exactly 50, then lets them go.
func TestMaxInFlightExact(t *testing.T) {
	t.Parallel()
	p := NewSyncJSON(t, WithLatency(time.Hour))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range parallel {
		wg.Go(func() { callCtx(t, ctx, http.DefaultClient, p, http.MethodPost, p.URL+"/m", prompt) })
	}
	eventually(t, "50 calls in flight", func() bool { return p.InFlight() == parallel })
	cancel()
	wg.Wait()
	eventually(t, "in flight back to zero", func() bool { return p.InFlight() == 0 })
	if p.MaxInFlight() != parallel || p.Submissions() != parallel {
		t.Fatalf("max %d subs %d", p.MaxInFlight(), p.Submissions())
	}
}

func TestCountersUnderConcurrencyQueues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		peer    func(testing.TB, ...Option) *Peer
		submit  func(t *testing.T, p *Peer) string // returns the URL that collects
		collect func(t *testing.T, p *Peer, url string) bool
	}{
		{"fal", NewFalQueue, func(t *testing.T, p *Peer) string {
			r := call(t, p, http.MethodPost, p.URL+"/fal-ai/flux/dev", prompt)
			if r.status != http.StatusOK {
				return ""
			}
			return r.obj(t)["response_url"].(string)
		}, func(t *testing.T, p *Peer, url string) bool {
			return call(t, p, http.MethodGet, url, "").status == http.StatusOK
		}},
		{"bfl", NewBFL, func(t *testing.T, p *Peer) string {
			r := call(t, p, http.MethodPost, p.URL+"/v1/flux-dev", prompt)
			if r.status != http.StatusOK {
				return ""
			}
			return r.obj(t)["polling_url"].(string)
		}, func(t *testing.T, p *Peer, url string) bool {
			r := call(t, p, http.MethodGet, url, "")
			return r.status == http.StatusOK && bytes.Contains(r.body, []byte(`"Ready"`))
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := tc.peer(t, WithNeverComplete())
			urls := make([]string, parallel)
			var wg sync.WaitGroup
			for i := range parallel {
				wg.Go(func() { urls[i] = tc.submit(t, p) })
			}
			wg.Wait()
			if p.Submissions() != parallel || p.InFlight() != parallel || p.MaxInFlight() != parallel {
				t.Fatalf("after submits: subs %d inflight %d max %d", p.Submissions(), p.InFlight(), p.MaxInFlight())
			}
			p.CompleteAll()
			ok := make([]bool, parallel)
			for i := range parallel {
				wg.Go(func() { ok[i] = urls[i] != "" && tc.collect(t, p, urls[i]) })
			}
			wg.Wait()
			for i, good := range ok {
				if !good {
					t.Fatalf("collect %d failed", i)
				}
			}
			if p.InFlight() != 0 || p.MaxInFlight() != parallel {
				t.Fatalf("after collects: inflight %d max %d", p.InFlight(), p.MaxInFlight())
			}
		})
	}
}

// TestHangReleasedByCloseWithoutLeaks hangs requests on every kind, closes
// the peers, and checks that the clients are released and the goroutine
// count returns to where it was. It is not parallel because it counts
// goroutines.
func TestHangReleasedByCloseWithoutLeaks(t *testing.T) {
	tr := &http.Transport{}
	client := &http.Client{Transport: tr}
	before := runtime.NumGoroutine()

	var peers []*Peer
	var done []chan reply
	for _, kind := range []Kind{KindSyncJSON, KindSyncBytes, KindFalQueue, KindBFL} {
		p, err := StartStandalone("127.0.0.1:0", kind, WithHang())
		if err != nil {
			t.Fatal(err)
		}
		peers = append(peers, p)
		for range 3 {
			ch := make(chan reply, 1)
			done = append(done, ch)
			go func() {
				ch <- callCtx(t, context.Background(), client, p, http.MethodPost, p.URL+"/fal-ai/flux/dev", prompt)
			}()
		}
	}
	for _, p := range peers {
		eventually(t, "requests to hang", func() bool { return p.OpenRequests() == 3 })
	}
	closed := make(chan struct{})
	go func() {
		for _, p := range peers {
			p.Close()
			p.Close() // idempotent
		}
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not release hanging requests")
	}
	for _, ch := range done {
		if r := <-ch; r.err == nil {
			t.Fatalf("hanging request answered %d", r.status)
		}
	}
	tr.CloseIdleConnections()
	eventually(t, "goroutines to return", func() bool { return runtime.NumGoroutine() <= before+2 })
}

func TestStandaloneArguments(t *testing.T) {
	t.Parallel()
	if _, err := StartStandalone("0.0.0.0:0", KindSyncJSON); err == nil {
		t.Fatal("non-loopback address accepted")
	}
	if _, err := StartStandalone("127.0.0.1:0", Kind("nope")); err == nil {
		t.Fatal("unknown kind accepted")
	}
	p, err := StartStandalone("127.0.0.1:0", KindConstant)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	r := call(t, p, http.MethodPost, p.URL+"/anything", prompt)
	wantStatus(t, r, http.StatusOK)
	if !bytes.Equal(r.body, ConstantBody) || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("constant body %q", r.body)
	}
	if n := len(ConstantBody); n < 80 || n > 120 {
		t.Fatalf("constant body is %d bytes, want about 100", n)
	}
}

func TestConstantAuth(t *testing.T) {
	t.Parallel()
	p := NewConstant(t, WithAuth("Authorization", "Bearer k"))
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt), http.StatusOK)
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt, "Authorization", "Bearer x"), http.StatusUnauthorized)
	p.SetOptions(WithAuth("", ""))
	wantStatus(t, call(t, p, http.MethodPost, p.URL+"/m", prompt, "Authorization", "Bearer x"), http.StatusOK)
}

// BenchmarkConstantPeer shows a peer can be driven from a *testing.B.
func BenchmarkConstantPeer(b *testing.B) {
	p := NewConstant(b)
	body := []byte(prompt)
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Post(p.URL+"/m", "application/json", bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	if p.Submissions() == 0 {
		b.Fatal("no submissions")
	}
}
