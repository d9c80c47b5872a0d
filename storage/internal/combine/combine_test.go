package combine

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// req is a request whose batch marks it run.
type req struct {
	id  int
	ran atomic.Int32
}

// recorder is a Run that records batches and can be held shut.
type recorder struct {
	gate    chan struct{} // nil: open
	mu      sync.Mutex
	batches [][]int
	running atomic.Int32
	maxRun  atomic.Int32
}

func (r *recorder) run(_ context.Context, batch []*req) {
	n := r.running.Add(1)
	for {
		m := r.maxRun.Load()
		if n <= m || r.maxRun.CompareAndSwap(m, n) {
			break
		}
	}
	if r.gate != nil {
		<-r.gate
	}
	ids := make([]int, len(batch))
	for i, q := range batch {
		q.ran.Add(1)
		ids[i] = q.id
	}
	r.mu.Lock()
	r.batches = append(r.batches, ids)
	r.mu.Unlock()
	r.running.Add(-1)
}

func TestLoneRequestGoesAlone(t *testing.T) {
	rec := &recorder{}
	c := &Combiner[*req]{Run: rec.run}
	alone, err := c.Do(context.Background(), &req{})
	if !alone || err != nil {
		t.Fatalf("Do on an idle combiner = %v, %v; want alone", alone, err)
	}
	c.Leave()
	alone, err = c.Do(context.Background(), &req{})
	if !alone || err != nil {
		t.Fatalf("Do after Leave = %v, %v; want alone again", alone, err)
	}
	c.Leave()
	if len(rec.batches) != 0 {
		t.Fatalf("lone requests ran in batches: %v", rec.batches)
	}
}

// While a lone request runs, others batch; each runs exactly once, batches
// stay within MaxBatch and no more than Inflight run at once.
func TestConcurrentRequestsBatch(t *testing.T) {
	const n = 100
	rec := &recorder{}
	c := &Combiner[*req]{Run: rec.run, Inflight: 3, MaxBatch: 8}
	if alone, _ := c.Do(context.Background(), &req{}); !alone {
		t.Fatal("first Do did not go alone")
	}
	reqs := make([]*req, n)
	var wg sync.WaitGroup
	for i := range reqs {
		reqs[i] = &req{id: i}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if alone, err := c.Do(context.Background(), reqs[i]); alone || err != nil {
				t.Errorf("Do(%d) = %v, %v; want batched", i, alone, err)
			}
			if reqs[i].ran.Load() != 1 {
				t.Errorf("Do(%d) returned before its batch ran", i)
			}
		}()
	}
	wg.Wait()
	c.Leave()
	for i, q := range reqs {
		if q.ran.Load() != 1 {
			t.Errorf("request %d ran %d times", i, q.ran.Load())
		}
	}
	for _, b := range rec.batches {
		if len(b) > 8 {
			t.Errorf("batch of %d > MaxBatch 8", len(b))
		}
	}
	// One slot is the lone request's, so at most two batches ran at once.
	if m := rec.maxRun.Load(); m > 2 {
		t.Errorf("%d batches ran at once, want at most Inflight-1 = 2", m)
	}
	if c.Pending() != 0 {
		t.Errorf("%d requests left pending", c.Pending())
	}
}

// A request still waiting when its context ends is never run.
func TestCanceledWaiterNeverRuns(t *testing.T) {
	rec := &recorder{gate: make(chan struct{})}
	c := &Combiner[*req]{Run: rec.run, Inflight: 2}
	if alone, _ := c.Do(context.Background(), &req{}); !alone {
		t.Fatal("first Do did not go alone")
	}
	first := &req{id: 1}
	firstDone := make(chan error)
	go func() { _, err := c.Do(context.Background(), first); firstDone <- err }()
	for rec.running.Load() == 0 { // first's batch started and is held
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	second := &req{id: 2}
	secondDone := make(chan error)
	go func() { _, err := c.Do(ctx, second); secondDone <- err }()
	for c.Pending() == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-secondDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled Do = %v, want context.Canceled", err)
	}
	if c.Pending() != 0 {
		t.Fatalf("%d pending after the cancel", c.Pending())
	}
	close(rec.gate)
	if err := <-firstDone; err != nil {
		t.Fatal(err)
	}
	c.Leave()
	if first.ran.Load() != 1 || second.ran.Load() != 0 {
		t.Errorf("first ran %d times, canceled second %d; want 1 and 0", first.ran.Load(), second.ran.Load())
	}
}
