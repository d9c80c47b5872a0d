package tracing

import (
	"context"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// gatedExporter records the spans exported; while gate is open (non-nil
// and not closed) each export waits on it.
type gatedExporter struct {
	mu       sync.Mutex
	names    []string
	batches  []int
	gate     chan struct{}
	deaf     bool // waits at the gate whatever its context
	shutdown bool
}

func (e *gatedExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.gate != nil && e.deaf {
		<-e.gate
	} else if e.gate != nil {
		select {
		case <-e.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range spans {
		e.names = append(e.names, s.Name())
	}
	e.batches = append(e.batches, len(spans))
	return nil
}

func (e *gatedExporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdown = true
	return nil
}

func (e *gatedExporter) exported() (names []string, batches []int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.names...), append([]int(nil), e.batches...)
}

// endSpans ends n spans named name through b, sampled or not.
func endSpans(b *batcher, name string, n int, sampled bool) {
	sampler := sdktrace.AlwaysSample()
	if !sampled {
		sampler = sdktrace.NeverSample()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(b))
	for range n {
		_, s := tp.Tracer(ScopeName).Start(context.Background(), name)
		s.End()
	}
}

// waitExported waits until exp has exported n spans.
func waitExported(t *testing.T, exp *gatedExporter, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		names, _ := exp.exported()
		if len(names) >= n {
			return names
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans exported, want %d", len(names), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitTaken waits until b's loop has taken its queue to export.
func waitTaken(t *testing.T, b *batcher) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b.mu.Lock()
		taken := len(b.queue) == 0
		b.mu.Unlock()
		if taken {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the loop did not take the full batch")
		}
		time.Sleep(time.Millisecond)
	}
}

// failsWithItsContext calls op (Shutdown or ForceFlush) with a context
// that ends after 50 ms while an export is stuck: op must return an error,
// and return at all (10 s is only the bound of a hang).
func failsWithItsContext(t *testing.T, name string, op func(context.Context) error) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		done <- op(ctx)
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("%s succeeded with an export stuck", name)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return after its context ended", name)
	}
}

func TestBatcher(t *testing.T) {
	long := batchConfig{delay: time.Hour, timeout: time.Minute, maxQueue: 100, maxBatch: 4}
	for _, tc := range []struct {
		name string
		cfg  batchConfig
		run  func(t *testing.T, b *batcher, exp *gatedExporter)
	}{
		{"a full batch is exported without waiting for the delay", long, func(t *testing.T, b *batcher, exp *gatedExporter) {
			endSpans(b, "s", 4, true)
			waitExported(t, exp, 4)
		}},
		{"a lone span is exported after the schedule delay", batchConfig{delay: 20 * time.Millisecond, timeout: time.Minute,
			maxQueue: 100, maxBatch: 4}, func(t *testing.T, b *batcher, exp *gatedExporter) {
			endSpans(b, "lone", 1, true)
			if names := waitExported(t, exp, 1); names[0] != "lone" {
				t.Fatalf("exported %v", names)
			}
		}},
		{"ForceFlush exports every span ended before it, in batches of at most maxBatch", long,
			func(t *testing.T, b *batcher, exp *gatedExporter) {
				endSpans(b, "s", 3, true)
				if err := b.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				if names, _ := exp.exported(); len(names) != 3 {
					t.Fatalf("after the first flush: %v", names)
				}
				endSpans(b, "t", 2, true)
				if err := b.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				names, batches := exp.exported()
				if len(names) != 5 || names[3] != "t" {
					t.Fatalf("exported %v", names)
				}
				for _, n := range batches {
					if n > 4 {
						t.Fatalf("a batch of %d, want at most 4 (%v)", n, batches)
					}
				}
			}},
		{"unsampled spans are not exported", long, func(t *testing.T, b *batcher, exp *gatedExporter) {
			endSpans(b, "unsampled", 10, false)
			endSpans(b, "sampled", 1, true)
			if err := b.ForceFlush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if names, _ := exp.exported(); len(names) != 1 || names[0] != "sampled" {
				t.Fatalf("exported %v", names)
			}
		}},
		{"a full queue drops what does not fit", batchConfig{delay: time.Hour, timeout: time.Minute, maxQueue: 3, maxBatch: 3},
			func(t *testing.T, b *batcher, exp *gatedExporter) {
				exp.gate = make(chan struct{})
				endSpans(b, "first", 3, true) // a full batch: the loop takes it and waits at the gate
				waitTaken(t, b)
				endSpans(b, "second", 5, true) // 3 fit, 2 are dropped
				close(exp.gate)
				if err := b.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				names, _ := exp.exported()
				b.mu.Lock()
				dropped := b.dropped
				b.mu.Unlock()
				if len(names) != 6 || dropped != 2 {
					t.Fatalf("exported %d (%v), dropped %d; want 6 and 2", len(names), names, dropped)
				}
			}},
		{"Shutdown exports the queue, stops the loop and the exporter, and takes no more", long,
			func(t *testing.T, b *batcher, exp *gatedExporter) {
				endSpans(b, "queued", 2, true)
				if err := b.Shutdown(context.Background()); err != nil {
					t.Fatal(err)
				}
				select {
				case <-b.stopped:
				default:
					t.Fatal("the export goroutine still runs")
				}
				endSpans(b, "late", 1, true)
				if err := b.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
				names, _ := exp.exported()
				exp.mu.Lock()
				shut := exp.shutdown
				exp.mu.Unlock()
				if len(names) != 2 || names[0] != "queued" || !shut {
					t.Fatalf("exported %v, exporter shut down %v; want the 2 queued and true", names, shut)
				}
				if err := b.Shutdown(context.Background()); err == nil {
					t.Fatal("a second Shutdown succeeded")
				}
			}},
		{"Shutdown and ForceFlush end with their context while an export hangs", long,
			func(t *testing.T, b *batcher, exp *gatedExporter) {
				exp.gate = make(chan struct{}) // never opened
				endSpans(b, "stuck", 4, true)  // a full batch: the loop's export waits at the gate
				waitTaken(t, b)
				endSpans(b, "queued", 1, true)
				failsWithItsContext(t, "ForceFlush", b.ForceFlush)
				failsWithItsContext(t, "Shutdown", b.Shutdown)
				select { // the loop's export was cancelled with Shutdown's context
				case <-b.stopped:
				case <-time.After(10 * time.Second):
					t.Fatal("the export goroutine still runs")
				}
				// "queued" is dropped: its export came after Shutdown's
				// context ended (counted once Shutdown's work, which goes
				// on alone, gets there).
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					b.mu.Lock()
					dropped := b.dropped
					b.mu.Unlock()
					if dropped == 1 {
						break
					}
					if dropped > 1 || time.Now().After(deadline) {
						t.Fatalf("dropped %d, want 1", dropped)
					}
				}
			}},
		{"Shutdown returns with its context even when the exporter ignores it", long,
			func(t *testing.T, b *batcher, exp *gatedExporter) {
				exp.gate, exp.deaf = make(chan struct{}), true
				defer close(exp.gate) // lets the stuck export end with the test
				endSpans(b, "stuck", 4, true)
				waitTaken(t, b)
				failsWithItsContext(t, "Shutdown", b.Shutdown)
				failsWithItsContext(t, "ForceFlush", b.ForceFlush)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := &gatedExporter{}
			b := newBatcher(exp, tc.cfg)
			tc.run(t, b, exp)
			_ = b.Shutdown(context.Background())
		})
	}
}

func TestBatchConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want batchConfig
	}{
		{"the SDK's defaults", nil, batchConfig{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}},
		{"set", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "100", "OTEL_BSP_EXPORT_TIMEOUT": "2000",
			"OTEL_BSP_MAX_QUEUE_SIZE": "64", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "16"},
			batchConfig{delay: 100 * time.Millisecond, timeout: 2 * time.Second, maxQueue: 64, maxBatch: 16}},
		{"not numbers or not positive: the defaults", map[string]string{"OTEL_BSP_SCHEDULE_DELAY": "soon",
			"OTEL_BSP_MAX_QUEUE_SIZE": "0", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "-5"},
			batchConfig{delay: 5 * time.Second, timeout: 30 * time.Second, maxQueue: 2048, maxBatch: 512}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, k := range []string{"OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT", "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"} {
				t.Setenv(k, tc.env[k])
			}
			if got := batchConfigFromEnv(); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestBatcherBatchCappedByQueue: a batch larger than the queue is the
// queue's size, as with the SDK's processor.
func TestBatcherBatchCappedByQueue(t *testing.T) {
	b := newBatcher(&gatedExporter{}, batchConfig{delay: time.Hour, timeout: time.Minute, maxQueue: 8, maxBatch: 512})
	defer b.Shutdown(context.Background())
	if b.cfg.maxBatch != 8 {
		t.Fatalf("maxBatch %d, want 8", b.cfg.maxBatch)
	}
}
