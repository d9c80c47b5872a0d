package tracing

import (
	"context"
	"errors"
	"os"
	"strconv"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/comfygate/comfygate/internal/metrics"
)

// batcher is a span processor that hands ended spans to an exporter in
// batches, as the SDK's BatchSpanProcessor does and configured by the same
// OTEL_BSP_* variables, but without waking a goroutine for every span: the
// SDK's processor sends each ended span over a channel to its export
// goroutine, so a request that ends a span pays that goroutine's wake-up
// (a futex call when the other processors are idle) and the goroutine a
// trip through the scheduler. Here an ended span is appended under a
// mutex, and the export goroutine wakes only when a batch is full or the
// schedule delay has passed. On the router's path at one call at a time
// that halves tracing's added latency (BENCHMARKS.md#tracing-issue-30).
type batcher struct {
	exp sdktrace.SpanExporter
	cfg batchConfig

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	closed  bool  // shut down: nothing more is queued
	dropped int64 // spans dropped because the queue was full

	full     chan struct{} // a batch is ready (capacity 1)
	stop     chan struct{}
	stopped  chan struct{}
	stopOnce sync.Once
	// loopCtx bounds the loop's exports; Shutdown cancels it when its own
	// context ends first.
	loopCtx    context.Context
	cancelLoop context.CancelFunc
	// exporting is a token that serialises exports (the loop, ForceFlush,
	// Shutdown), so that a flush returns only once every span ended
	// before it is out; a channel, so that waiting for it heeds a context.
	exporting chan struct{}
}

// batchConfig is the batcher's pace and bounds.
type batchConfig struct {
	delay    time.Duration // OTEL_BSP_SCHEDULE_DELAY: the longest a span waits
	timeout  time.Duration // OTEL_BSP_EXPORT_TIMEOUT, per export
	maxQueue int           // OTEL_BSP_MAX_QUEUE_SIZE: ended spans waiting; more are dropped
	maxBatch int           // OTEL_BSP_MAX_EXPORT_BATCH_SIZE
}

// batchConfigFromEnv reads the OTEL_BSP_* variables, with the SDK's
// defaults for those unset or not a positive number.
func batchConfigFromEnv() batchConfig {
	return batchConfig{
		delay:    envMillis("OTEL_BSP_SCHEDULE_DELAY", sdktrace.DefaultScheduleDelay*time.Millisecond),
		timeout:  envMillis("OTEL_BSP_EXPORT_TIMEOUT", sdktrace.DefaultExportTimeout*time.Millisecond),
		maxQueue: envInt("OTEL_BSP_MAX_QUEUE_SIZE", sdktrace.DefaultMaxQueueSize),
		maxBatch: envInt("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", sdktrace.DefaultMaxExportBatchSize),
	}
}

// newBatcher starts a batcher exporting to exp.
func newBatcher(exp sdktrace.SpanExporter, cfg batchConfig) *batcher {
	if cfg.maxBatch > cfg.maxQueue { // as the SDK's processor
		cfg.maxBatch = min(sdktrace.DefaultMaxExportBatchSize, cfg.maxQueue)
	}
	b := &batcher{
		exp: exp, cfg: cfg,
		full:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
		exporting: make(chan struct{}, 1),
	}
	b.loopCtx, b.cancelLoop = context.WithCancel(context.Background())
	go b.run()
	return b
}

func (b *batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s, or drops it when the queue is full.
func (b *batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.closed || len(b.queue) >= b.cfg.maxQueue {
		b.dropped++
		b.mu.Unlock()
		metrics.TracingSpansDropped.Inc()
		return
	}
	b.queue = append(b.queue, s)
	ready := len(b.queue) == b.cfg.maxBatch
	b.mu.Unlock()
	if ready {
		select {
		case b.full <- struct{}{}:
		default: // already signalled
		}
	}
}

func (b *batcher) run() {
	defer close(b.stopped)
	tick := time.NewTicker(b.cfg.delay)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
		case <-b.full:
		}
		if err := b.export(b.loopCtx); err != nil {
			otel.Handle(err)
		}
	}
}

// export sends every span queued now, in batches of at most maxBatch.
// Once ctx ends, the batches not yet sent are dropped.
func (b *batcher) export(ctx context.Context) error {
	select {
	case b.exporting <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { <-b.exporting }()
	b.mu.Lock()
	spans := b.queue
	b.queue = nil
	b.mu.Unlock()
	var errs error
	for len(spans) > 0 {
		if err := ctx.Err(); err != nil {
			b.drop(len(spans))
			return errors.Join(errs, err)
		}
		n := min(len(spans), b.cfg.maxBatch)
		ectx, cancel := context.WithTimeout(ctx, b.cfg.timeout)
		errs = errors.Join(errs, b.exp.ExportSpans(ectx, spans[:n]))
		cancel()
		spans = spans[n:]
	}
	return errs
}

// drop counts n spans that will not be exported.
func (b *batcher) drop(n int) {
	b.mu.Lock()
	b.dropped += int64(n)
	b.mu.Unlock()
	metrics.TracingSpansDropped.Add(float64(n))
}

// ForceFlush exports every span ended so far. It returns when that is
// done or ctx ends, whichever is first: an exporter that ignores its
// context cannot hold the caller.
func (b *batcher) ForceFlush(ctx context.Context) error {
	return within(ctx, func() error { return b.export(ctx) })
}

// Shutdown stops the export goroutine, exports what is queued and shuts
// the exporter down, returning when that is done or ctx ends, whichever is
// first; an export under way then is cancelled. Spans ended after it are
// dropped.
func (b *batcher) Shutdown(ctx context.Context) error {
	err := errors.New("tracing: span processor already shut down")
	b.stopOnce.Do(func() {
		err = within(ctx, func() error {
			close(b.stop)
			<-b.stopped
			b.mu.Lock()
			b.closed = true
			b.mu.Unlock()
			err := b.export(ctx)
			b.mu.Lock()
			left := len(b.queue) // when ctx ended before the export began
			b.queue = nil
			b.mu.Unlock()
			if left > 0 {
				b.drop(left)
			}
			return errors.Join(err, b.exp.Shutdown(ctx))
		})
		b.cancelLoop() // ends the loop's export if ctx ended first
	})
	return err
}

// within runs f and returns its error, or ctx's once ctx ends first (f
// then goes on alone).
func within(ctx context.Context, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// envMillis reads a duration in milliseconds from the environment.
func envMillis(name string, def time.Duration) time.Duration {
	if n := envInt(name, -1); n > 0 {
		return time.Duration(n) * time.Millisecond
	}
	return def
}

// envInt reads a positive integer from the environment.
func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

var _ sdktrace.SpanProcessor = (*batcher)(nil)
