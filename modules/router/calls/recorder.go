package calls

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/storage"
)

// Records of calls without an Idempotency-Key are audit only (no later
// request reads them), so they are written off the request path, in
// batches: the caller gets its answer without waiting for a commit, and the
// database pays one commit per batch instead of one per call. A full queue
// falls back to writing on the request path (backpressure, never loss).
//
// A failed batch write (the database restarting, a failover) is retried
// with capped exponential backoff for as long as the service runs: the
// records are the only trace of what a call charged. When the service
// closes, a batch still failing gets one last synchronous try, bounded by
// settleTimeout, and is then logged record by record.
const (
	recorderQueue   = 8192
	recorderWorkers = 2
	recorderBatch   = 256
	// recorderLinger is how long a worker waits for more records before
	// writing a batch: bounded staleness of the audit trail in exchange for
	// one database round trip per batch instead of per call.
	recorderLinger = 20 * time.Millisecond
	// recorderBackoffMin and recorderBackoffMax pace retries of a failed
	// batch write.
	recorderBackoffMin = 50 * time.Millisecond
	recorderBackoffMax = 5 * time.Second
)

type recorder struct {
	mu     sync.RWMutex
	closed bool
	// closing is closed when close starts: retries stop waiting and make
	// their last attempt.
	closing chan struct{}
	ch      chan storage.RouterCall
	wg      sync.WaitGroup
	write   func(ctx context.Context, recs []storage.RouterCall) error
	log     *zap.Logger
}

func newRecorder(write func(context.Context, []storage.RouterCall) error, log *zap.Logger) *recorder {
	r := &recorder{ch: make(chan storage.RouterCall, recorderQueue), closing: make(chan struct{}), write: write, log: log}
	for range recorderWorkers {
		r.wg.Add(1)
		go r.run()
	}
	return r
}

// run writes queued records in batches of up to recorderBatch, waiting at
// most recorderLinger after the first one for others to join.
func (r *recorder) run() {
	defer r.wg.Done()
	batch := make([]storage.RouterCall, 0, recorderBatch)
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for rec := range r.ch {
		batch = append(batch[:0], rec)
		linger.Reset(recorderLinger)
	fill:
		for len(batch) < recorderBatch {
			select {
			case more, ok := <-r.ch:
				if !ok {
					break fill
				}
				batch = append(batch, more)
			case <-linger.C:
				break fill
			}
		}
		linger.Stop()
		r.writeRetrying(batch)
	}
}

// writeRetrying writes recs, retrying a failure with capped exponential
// backoff until it succeeds or the recorder closes; then one last attempt
// is made and a failure is logged.
func (r *recorder) writeRetrying(recs []storage.RouterCall) {
	backoff := recorderBackoffMin
	for attempt := 1; ; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
		err := r.write(ctx, recs)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-r.closing:
			r.writeLogged(recs)
			return
		default:
		}
		r.log.Warn("router: writing usage records failed; retrying", zap.Int("records", len(recs)),
			zap.Int("attempt", attempt), zap.Duration("backoff", backoff), zap.Error(err))
		t := time.NewTimer(backoff)
		select {
		case <-r.closing:
			t.Stop()
			r.writeLogged(recs)
			return
		case <-t.C:
		}
		backoff = min(2*backoff, recorderBackoffMax)
	}
}

func (r *recorder) writeLogged(recs []storage.RouterCall) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := r.write(ctx, recs); err != nil {
		for _, rec := range recs {
			r.log.Error("router: writing the usage record failed", zap.String("request_id", rec.RequestID),
				zap.String("state", rec.State), zap.Int64("charged_cents", rec.ChargedCents), zap.Error(err))
		}
	}
}

// enqueue hands rec to the writers, or writes it now when the queue is full
// or closed.
func (r *recorder) enqueue(rec storage.RouterCall) {
	r.mu.RLock()
	if !r.closed {
		select {
		case r.ch <- rec:
			r.mu.RUnlock()
			return
		default:
		}
	}
	r.mu.RUnlock()
	r.writeLogged([]storage.RouterCall{rec})
}

// close drains the queue and stops the writers.
func (r *recorder) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.closing)
		close(r.ch)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
