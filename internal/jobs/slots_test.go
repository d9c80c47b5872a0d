package jobs

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// gateExecutor holds every attempt until released, counting how many run
// at once.
type gateExecutor struct {
	catalog       func(context.Context) (workflow.Catalog, error)
	mu            sync.Mutex
	running, most int
	release       chan struct{}
}

func (g *gateExecutor) Catalog(ctx context.Context) (workflow.Catalog, error) { return g.catalog(ctx) }

func (g *gateExecutor) Execute(ctx context.Context, run *Run) error {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	select {
	case <-g.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *gateExecutor) counts() (running, most int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running, g.most
}

// TestDispatcherSlots: with Slots set, the dispatcher runs no more attempts
// than Slots answers now (a pool whose workers come and go), and takes more
// when it answers more.
func TestDispatcherSlots(t *testing.T) {
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	e.addAsset(t, "acct", "a.png", pngBytes)
	var ids []string
	for range 5 {
		j, err := e.svc.Submit(context.Background(), "acct", submitBody(t, invertGraph("a.png")))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	exec := &gateExecutor{catalog: e.exec.Catalog, release: make(chan struct{})}
	var slots atomic.Int64
	slots.Store(1)
	d := &Dispatcher{
		Store: e.store, Blobs: e.blobs, Bus: e.hub, Exec: exec, ExtraData: e.svc.ExtraData,
		Config: DispatcherConfig{Pool: testPool, Concurrency: 8, Lease: 2 * time.Second, MaxAttempts: 2,
			RunningBound: time.Hour, PollInterval: 20 * time.Millisecond},
		Slots:  func() int { return int(slots.Load()) },
		Owner:  "test-owner",
		Logger: zaptest.NewLogger(t),
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(waitLimit); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	waitFor("one attempt running", func() bool { r, _ := exec.counts(); return r == 1 })
	time.Sleep(200 * time.Millisecond) // ten polls: a second attempt would have started
	if _, most := exec.counts(); most != 1 {
		t.Fatalf("%d attempts at once with 1 slot", most)
	}
	slots.Store(3)
	waitFor("three attempts running", func() bool { r, _ := exec.counts(); return r == 3 })
	time.Sleep(200 * time.Millisecond)
	if _, most := exec.counts(); most != 3 {
		t.Fatalf("%d attempts at once with 3 slots", most)
	}
	close(exec.release)
	for _, id := range ids {
		waitStatus(t, e, "acct", id, storage.JobSucceeded)
	}
}
