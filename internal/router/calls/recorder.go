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
	// recorderLinger is how long a batch gathers records after its first
	// one before it is written: bounded staleness of the audit trail in
	// exchange for one database round trip per batch instead of per call.
	recorderLinger = 20 * time.Millisecond
	// recorderBackoffMin and recorderBackoffMax pace retries of a failed
	// batch write.
	recorderBackoffMin = 50 * time.Millisecond
	recorderBackoffMax = 5 * time.Second
)

// recorder queues records under a mutex rather than in a channel: a
// channel send wakes a waiting writer for every record, while here only
// the first record of a batch does (a goroutine wake-up per call is
// measurable next to the call itself).
type recorder struct {
	mu      sync.Mutex
	closed  bool
	pending []storage.RouterCall // records not yet taken by a writer
	// closing is closed when close starts: retries stop waiting and make
	// their last attempt, writers take what is left.
	closing chan struct{}
	// wake tells the writers that pending went from empty to not empty.
	wake  chan struct{}
	wg    sync.WaitGroup
	write func(ctx context.Context, recs []storage.RouterCall) error
	log   *zap.Logger
}

func newRecorder(write func(context.Context, []storage.RouterCall) error, log *zap.Logger) *recorder {
	r := &recorder{closing: make(chan struct{}), wake: make(chan struct{}, recorderWorkers), write: write, log: log}
	for range recorderWorkers {
		r.wg.Add(1)
		go r.run()
	}
	return r
}

// run writes pending records in batches of up to recorderBatch, each
// gathered for recorderLinger after a wake-up; after close it writes what
// is left and returns.
func (r *recorder) run() {
	defer r.wg.Done()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		select {
		case <-r.wake:
			linger.Reset(recorderLinger)
			select {
			case <-linger.C:
			case <-r.closing:
				linger.Stop()
			}
		case <-r.closing:
		}
		for {
			batch, more := r.take()
			if len(batch) == 0 {
				break
			}
			r.writeRetrying(batch)
			if !more {
				break
			}
		}
		select {
		case <-r.closing:
			r.mu.Lock()
			left := len(r.pending)
			r.mu.Unlock()
			if left == 0 {
				return
			}
		default:
		}
	}
}

// take removes up to recorderBatch pending records; more reports that some
// are left, and then another writer is woken for them.
func (r *recorder) take() (batch []storage.RouterCall, more bool) {
	r.mu.Lock()
	n := min(len(r.pending), recorderBatch)
	batch = append([]storage.RouterCall(nil), r.pending[:n]...)
	r.pending = append(r.pending[:0], r.pending[n:]...)
	more = len(r.pending) > 0
	r.mu.Unlock()
	if more {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return batch, more
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
	r.mu.Lock()
	if !r.closed && len(r.pending) < recorderQueue {
		r.pending = append(r.pending, rec)
		first := len(r.pending) == 1
		r.mu.Unlock()
		if first {
			select {
			case r.wake <- struct{}{}:
			default: // a wake-up is already waiting
			}
		}
		return
	}
	r.mu.Unlock()
	r.writeLogged([]storage.RouterCall{rec})
}

// close writes what is queued and stops the writers.
func (r *recorder) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		close(r.closing)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
