package comfyui

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/workflow"
)

// benchPool is a pool of n workers that look connected and healthy (no
// network: the scheduler alone), each holding two of six models.
func benchPool(tb testing.TB, n int) *Pool {
	tb.Helper()
	cat, err := workflow.ParseObjectInfo([]byte(affinityCatalog))
	if err != nil {
		tb.Fatal(err)
	}
	var workers []WorkerConfig
	for i := range n {
		workers = append(workers, WorkerConfig{URL: fmt.Sprintf("http://127.0.0.1:%d", 20000+i)})
	}
	// AffinityWait 1ns: a job whose warm workers are busy goes cold at once.
	p, err := New(Config{Workers: workers, AffinityModels: 2, AffinityWait: time.Nanosecond}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	for i, w := range p.all() {
		w.mu.Lock()
		w.healthy, w.catalog = true, cat
		w.models.use([]string{fmt.Sprintf("m%d", i%6), fmt.Sprintf("m%d", (i+1)%6)})
		w.mu.Unlock()
		p.reindex(w)
	}
	return p
}

// BenchmarkAcquire is the scheduler's cost per job: acquire a worker for a
// job of one model (round robin over six) and release it, with a quarter
// of the pool kept busy.
func BenchmarkAcquire(b *testing.B) {
	for _, n := range []int{4, 100} {
		b.Run(fmt.Sprint("workers=", n), func(b *testing.B) {
			p := benchPool(b, n)
			ctx := context.Background()
			var held []*worker
			for range n / 4 {
				w, _, err := p.acquire(ctx, []string{"KSampler"}, nil)
				if err != nil {
					b.Fatal(err)
				}
				held = append(held, w)
			}
			models := [][]string{{"m0"}, {"m1"}, {"m2"}, {"m3"}, {"m4"}, {"m5"}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				w, _, err := p.acquire(ctx, []string{"KSampler", "CheckpointLoaderSimple"}, models[i%6])
				if err != nil {
					b.Fatal(err)
				}
				w.release()
			}
			b.StopTimer()
			for _, w := range held {
				w.release()
			}
		})
	}
}

// TestAcquireIndexed holds the index to what a walk over the workers
// would pick: warm idle first, least loaded among equals, and a drained
// worker never.
func TestAcquireIndexed(t *testing.T) {
	p := benchPool(t, 12)
	ctx := context.Background()
	w, warm, err := p.acquire(ctx, []string{"KSampler"}, []string{"m3"})
	if err != nil {
		t.Fatal(err)
	}
	if !warm || (w.idx%6 != 3 && (w.idx+1)%6 != 3) {
		t.Fatalf("a job of m3 went to worker %d (warm %v); the holders are 2, 3, 8, 9", w.idx, warm)
	}
	// Drain every other holder of m3: the next m3 job must not go there.
	for _, x := range p.all() {
		if x != w && (x.idx%6 == 3 || (x.idx+1)%6 == 3) {
			p.drain(x, sourceAdmin)
		}
	}
	w2, warm2, err := p.acquire(ctx, []string{"KSampler"}, []string{"m3"})
	if err != nil {
		t.Fatal(err)
	}
	if w2 == w || w2.draining {
		t.Fatalf("second job on worker %d (draining %v)", w2.idx, w2.draining)
	}
	if warm2 {
		t.Fatalf("second job counted warm on worker %d", w2.idx)
	}
	w.release()
	w2.release()
}

// BenchmarkWalk is the baseline the index replaced: what a walk over every
// worker (its lock, its classes, its models) costs per job.
func BenchmarkWalk(b *testing.B) {
	for _, n := range []int{4, 100} {
		b.Run(fmt.Sprint("workers=", n), func(b *testing.B) {
			p := benchPool(b, n)
			classes, models := []string{"KSampler", "CheckpointLoaderSimple"}, []string{"m3"}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				var best *worker
				bestLoad := 0.0
				for _, w := range p.all() {
					if !w.hasClasses(classes) {
						continue
					}
					w.mu.Lock()
					load := float64(w.inflight) - float64(w.models.holds(models))
					w.mu.Unlock()
					if best == nil || load < bestLoad {
						best, bestLoad = w, load
					}
				}
				if best == nil {
					b.Fatal("no worker")
				}
			}
		})
	}
}
