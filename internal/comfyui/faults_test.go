package comfyui_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/jobs"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

const slowGraph = `{
	"1": {"class_type": "SlowNode", "inputs": {"steps": 40, "step_ms": 50}},
	"2": {"class_type": "TextOutput", "inputs": {"text": "after"}}
}`

func TestCancel(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// pending cancels the second of two prompts on a one-at-a-time worker.
		pending bool
		// ownIDs: the worker ignores the client's prompt_id (ComfyUI before
		// upstream 260a5ca5).
		ownIDs bool
	}{{"running", false, false}, {"pending", true, false}, {"running, own ids", false, true}, {"pending, own ids", true, true}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			peer.Set(func(s *comfyuipeer.Switches) { s.OwnPromptIDs = tc.ownIDs })
			pool := newPool(t, 2, peer)
			first, _ := newRun(t, slowGraph, nil)
			ctx1, cancel1 := context.WithCancel(context.Background())
			defer cancel1()
			done1 := runAsync(ctx1, pool, first)
			eventually(t, "the first prompt running", func() bool { return peer.Running() != "" })
			target, targetDone, cancel := first, done1, cancel1
			if tc.pending {
				second, _ := newRun(t, slowGraph, nil)
				ctx2, cancel2 := context.WithCancel(context.Background())
				defer cancel2()
				done2 := runAsync(ctx2, pool, second)
				eventually(t, "the second prompt queued", func() bool { return peer.Stats().Prompts == 2 })
				target, targetDone, cancel = second, done2, cancel2
			}
			_ = target
			cancel()
			if err := wait(t, targetDone); !errors.Is(err, context.Canceled) {
				t.Fatalf("Execute = %v, want context.Canceled", err)
			}
			st := peer.Stats()
			if tc.pending && (st.QueueDeletes != 1 || st.Interrupts != 0) {
				t.Errorf("pending cancel: %+v, want one queue delete and no interrupt", st)
			}
			if !tc.pending && st.Interrupts != 1 {
				t.Errorf("running cancel: %+v, want one interrupt", st)
			}
			if tc.pending {
				if err := wait(t, done1); err != nil {
					t.Errorf("the first prompt: %v", err)
				}
			}
		})
	}
}

func TestFaultSwitches(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// during runs while the prompt executes on the peer.
		during  func(t *testing.T, p *comfyuipeer.Peer)
		setup   func(s *comfyuipeer.Switches)
		wantErr func(error) bool
	}{
		{
			name:    "history written late",
			setup:   func(s *comfyuipeer.Switches) { s.HistoryDelay = time.Second },
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name:    "slow node",
			setup:   func(s *comfyuipeer.Switches) { s.Slow = 200 * time.Millisecond },
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name: "dropped socket, prompt finishes while disconnected",
			during: func(t *testing.T, p *comfyuipeer.Peer) {
				p.Set(func(s *comfyuipeer.Switches) { s.RejectSockets = true })
				p.DropSockets()
				eventually(t, "the prompt finished", func() bool { return len(p.HistoryIDs()) == 1 })
				p.Set(func(s *comfyuipeer.Switches) { s.RejectSockets = false })
			},
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name:    "dropped socket, prompt still running",
			during:  func(t *testing.T, p *comfyuipeer.Peer) { p.DropSockets() },
			wantErr: func(err error) bool { return err == nil },
		},
		{
			name:    "restart loses history",
			during:  func(t *testing.T, p *comfyuipeer.Peer) { p.Restart() },
			wantErr: isWorkerLost,
		},
		{
			name:    "crash",
			during:  func(t *testing.T, p *comfyuipeer.Peer) { p.Crash() },
			wantErr: isWorkerLost,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			if tc.setup != nil {
				peer.Set(tc.setup)
			}
			pool := newPool(t, 1, peer)
			run, rec := newRun(t, slowGraph, nil)
			done := runAsync(context.Background(), pool, run)
			if tc.during != nil {
				eventually(t, "the prompt running", func() bool { return peer.Running() != "" })
				tc.during(t, peer)
			}
			err := wait(t, done)
			if !tc.wantErr(err) {
				t.Fatalf("Execute = %v", err)
			}
			_, _, outs := rec.snapshot()
			if err == nil && (len(outs) != 1 || string(outs[0].data) != "after") {
				t.Errorf("outputs %v, want the text output exactly once", outs)
			}
		})
	}
}

func isWorkerLost(err error) bool {
	var lost *jobs.WorkerLostError
	return errors.As(err, &lost)
}

func TestClassOnlyOnSomeWorkers(t *testing.T) {
	t.Parallel()
	without := comfyuipeer.New(t, comfyuipeer.Options{OmitClasses: []string{"TextOutput"}})
	with := comfyuipeer.New(t, comfyuipeer.Options{})
	pool := newPool(t, 1, without, with)
	cat, err := pool.Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cat["TextOutput"]; !ok {
		t.Fatal("the union catalog lacks a class one worker has")
	}
	for range 3 {
		run, _ := newRun(t, `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`, nil)
		if err := pool.Execute(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	if n := without.Stats().Prompts; n != 0 {
		t.Errorf("the worker without the class got %d prompts", n)
	}
	if n := with.Stats().Prompts; n != 3 {
		t.Errorf("the worker with the class got %d prompts, want 3", n)
	}
}

func TestNoWorkerAnswers(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	peer.Crash()
	pool, err := comfyui.New(comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: peer.URL}},
		UnhealthyAfter: 300 * time.Millisecond, RequestTimeout: time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Catalog(context.Background()); err == nil {
		t.Fatal("Catalog answered with no worker reachable")
	}
	run, _ := newRun(t, `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`, nil)
	if err := pool.Execute(context.Background(), run); !isWorkerLost(err) {
		t.Fatalf("Execute = %v, want WorkerLostError", err)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  comfyui.Config
		ok   bool
	}{
		{"relative url", comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: "127.0.0.1:8188"}}}, false},
		{"query", comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: "http://h:1/?a=b"}}}, false},
		{"duplicate", comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: "http://h:1"}, {URL: "http://h:1"}}}, false},
		{"negative concurrency", comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: "http://h:1", Concurrency: -1}}}, false},
		{"defaults", comfyui.Config{Workers: []comfyui.WorkerConfig{{URL: "http://h:1"}, {URL: "https://h:2", Concurrency: 3}}}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := comfyui.New(tc.cfg, nil)
			if (err == nil) != tc.ok {
				t.Fatalf("New = %v, want ok=%v", err, tc.ok)
			}
			if err == nil {
				if p.Capacity() != 4 {
					t.Errorf("capacity %d, want 4", p.Capacity())
				}
				p.Close()
			}
		})
	}
}

// TestPoolAtZero: a pool may have no worker (an autoscaler fills it). It
// has no capacity, so nothing is claimed for it; its catalog is the last
// one a worker gave, so that submissions keep queueing once the last
// worker is gone; before any worker answered it is a 503.
func TestPoolAtZero(t *testing.T) {
	t.Parallel()
	p, err := comfyui.New(comfyui.Config{UnhealthyAfter: time.Second}, nil)
	if err != nil {
		t.Fatalf("a pool with no worker: %v", err)
	}
	defer p.Close()
	p.Start()
	if p.Capacity() != 0 || p.Available() != 0 {
		t.Fatalf("capacity %d, available %d at zero", p.Capacity(), p.Available())
	}
	if _, err := p.Catalog(context.Background()); err == nil {
		t.Fatal("a catalog before any worker answered")
	} else if e, ok := apierr.As(err); !ok || e.Status != 503 || e.RetryAfter == 0 {
		t.Fatalf("Catalog at zero = %v, want a 503 with Retry-After", err)
	}
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	if err := p.AddWorker(comfyui.WorkerConfig{URL: peer.URL}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the worker available", func() bool { return p.Available() == 1 && p.Capacity() == 1 })
	if err := p.RemoveWorker(peer.URL); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the pool back at zero", func() bool { return len(p.Workers()) == 0 && p.Capacity() == 0 })
	cat, err := p.Catalog(context.Background())
	if err != nil {
		t.Fatalf("Catalog back at zero: %v; want the last worker's", err)
	}
	if _, ok := cat["SlowNode"]; !ok {
		t.Fatalf("the kept catalog lacks the worker's SlowNode")
	}
}
