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
const (
	recorderQueue   = 8192
	recorderWorkers = 2
	recorderBatch   = 256
	// recorderLinger is how long a worker waits for more records before
	// writing a batch: bounded staleness of the audit trail in exchange for
	// one database round trip per batch instead of per call.
	recorderLinger = 20 * time.Millisecond
)

type recorder struct {
	mu     sync.RWMutex
	closed bool
	ch     chan storage.RouterCall
	wg     sync.WaitGroup
	write  func(ctx context.Context, recs []storage.RouterCall) error
	log    *zap.Logger
}

func newRecorder(write func(context.Context, []storage.RouterCall) error, log *zap.Logger) *recorder {
	r := &recorder{ch: make(chan storage.RouterCall, recorderQueue), write: write, log: log}
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
		r.writeLogged(batch)
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
		close(r.ch)
	}
	r.mu.Unlock()
	r.wg.Wait()
}
