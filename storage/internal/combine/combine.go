// Package combine gathers the requests of concurrent callers into batches,
// so that one database statement or one Redis pipeline serves many of them:
// one round trip, one commit, one system call instead of one each.
//
// A request that finds nothing in flight goes out alone, at once, the way
// it would without batching, so batching adds no wait when there is no
// contention. Requests that arrive while the allowed number of batches (or
// lone requests) are running wait, and the next batch takes all of them.
package combine

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Combiner batches requests of type R (normally a pointer the batch fills
// with its result). The zero value is not usable: set Run.
type Combiner[R any] struct {
	// Inflight is how many batches and lone requests may run at once
	// (default 1). More than one lets a batch gather while another waits
	// on its reply.
	Inflight int
	// MaxBatch bounds one batch (default 64).
	MaxBatch int
	// Timeout bounds one batch (default 30 s): a batch serves many
	// requests, so it runs on no single caller's context.
	Timeout time.Duration
	// Run handles one batch and records each request's result in it. It is
	// called from a goroutine of the combiner's.
	Run func(ctx context.Context, batch []R)

	mu       sync.Mutex
	pending  []*waiter[R]
	inflight int
}

type waiter[R any] struct {
	req  R
	done chan struct{}
}

func (c *Combiner[R]) limit() int { return max(c.Inflight, 1) }

// Do hands req to a batch and returns once the batch has run. When nothing
// is in flight it returns alone true at once instead, without running req:
// the caller handles it itself and must call Leave afterwards. err is set
// only when ctx ended first; req was then not run if it was still waiting,
// and may have been if not.
func (c *Combiner[R]) Do(ctx context.Context, req R) (alone bool, err error) {
	c.mu.Lock()
	if c.inflight == 0 && len(c.pending) == 0 {
		c.inflight++
		c.mu.Unlock()
		return true, nil
	}
	w := &waiter[R]{req: req, done: make(chan struct{})}
	c.pending = append(c.pending, w)
	if c.inflight < c.limit() {
		c.inflight++
		go c.flush()
	}
	c.mu.Unlock()
	select {
	case <-w.done:
		return false, nil
	case <-ctx.Done():
	}
	c.mu.Lock()
	if i := slices.Index(c.pending, w); i >= 0 {
		c.pending = slices.Delete(c.pending, i, i+1) // never sent
	}
	c.mu.Unlock()
	return false, ctx.Err()
}

// Leave ends a lone request, handing requests that arrived meanwhile to a
// batch.
func (c *Combiner[R]) Leave() {
	c.mu.Lock()
	c.inflight--
	start := len(c.pending) > 0 && c.inflight < c.limit()
	if start {
		c.inflight++
	}
	c.mu.Unlock()
	if start {
		go c.flush()
	}
}

// Pending is how many requests wait for a batch (for tests).
func (c *Combiner[R]) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// flush runs batches until none is waiting, then gives up its slot.
func (c *Combiner[R]) flush() {
	maxBatch, timeout := c.MaxBatch, c.Timeout
	if maxBatch <= 0 {
		maxBatch = 64
	}
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	for {
		c.mu.Lock()
		if len(c.pending) == 0 {
			c.inflight--
			c.mu.Unlock()
			return
		}
		n := min(len(c.pending), maxBatch)
		batch := slices.Clone(c.pending[:n])
		c.pending = slices.Delete(c.pending, 0, n)
		c.mu.Unlock()
		c.run(batch, timeout)
	}
}

func (c *Combiner[R]) run(batch []*waiter[R], timeout time.Duration) {
	reqs := make([]R, len(batch))
	for i, w := range batch {
		reqs[i] = w.req
	}
	defer func() {
		for _, w := range batch {
			close(w.done)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	c.Run(ctx, reqs)
}
