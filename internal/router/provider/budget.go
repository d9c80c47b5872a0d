package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// DefaultResponseBudget is the process-wide bound on partner answer bytes
// being read at once: four maximal answers. Without it, many concurrent
// calls answering near MaxResponseBytes could exhaust memory.
const DefaultResponseBudget = 4 * MaxResponseBytes

// DefaultBudgetWait is how long a read waits for room before giving up.
const DefaultBudgetWait = 2 * time.Second

// readChunk is the granularity of reads and of budget reservations for
// answers without a Content-Length.
const readChunk = 64 << 10

// ErrResponseBudget is a partner answer that could not be read because the
// process-wide bound on answer bytes in flight had no room for it in time.
// The router answers 503 service_unavailable: the partner is fine, this
// process is momentarily full, and a retry with backoff clears it.
var ErrResponseBudget = errors.New("provider: no room to read the partner's answer")

// processBudget is shared by every Client that does not set its own, so
// the bound holds across config reloads (each builds a new Client).
var processBudget = newByteBudget(DefaultResponseBudget)

// byteBudget is a weighted semaphore over bytes. The reservation covers an
// answer while it is read; it is returned when Client.Do returns, so it
// bounds bytes being received at once, which is where concurrent huge
// answers pile up.
type byteBudget struct {
	mu      sync.Mutex
	limit   int64
	used    int64
	waiters int           // acquires waiting for room
	freed   chan struct{} // closed and replaced on a release that someone waits for
}

func newByteBudget(limit int64) *byteBudget {
	return &byteBudget{limit: limit, freed: make(chan struct{})}
}

// acquire reserves n bytes, waiting at most wait (or until ctx ends).
func (b *byteBudget) acquire(ctx context.Context, n int64, wait time.Duration) error {
	if n > b.limit {
		return fmt.Errorf("%w: %d bytes exceed the budget of %d", ErrResponseBudget, n, b.limit)
	}
	var timeout <-chan time.Time
	for {
		b.mu.Lock()
		if b.used+n <= b.limit {
			b.used += n
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.waiters++
		b.mu.Unlock()
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		var err error
		select {
		case <-freed:
		case <-timeout:
			err = fmt.Errorf("%w: %d bytes wanted, budget of %d full", ErrResponseBudget, n, b.limit)
		case <-ctx.Done():
			err = ctx.Err()
		}
		b.mu.Lock()
		b.waiters--
		b.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (b *byteBudget) release(n int64) {
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.waiters > 0 {
		close(b.freed)
		b.freed = make(chan struct{})
	}
	b.mu.Unlock()
}

// inUse reports the bytes reserved (for tests).
func (b *byteBudget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// readBody reads an answer of at most MaxResponseBytes, reserving budget
// ahead of the bytes it reads: the whole Content-Length up front when the
// partner sent one, else growing by doubling.
func (c *Client) readBody(ctx context.Context, r io.Reader, contentLength int64) ([]byte, error) {
	if contentLength > MaxResponseBytes {
		return nil, fmt.Errorf("provider: answer over %d bytes", MaxResponseBytes)
	}
	var held int64
	defer func() { c.budget.release(held) }()
	reserve := func(need int64) error {
		if need <= held {
			return nil
		}
		want := min(max(need, 2*held, readChunk), MaxResponseBytes+1)
		if err := c.budget.acquire(ctx, want-held, c.opts.BudgetWait); err != nil {
			return err
		}
		held = want
		return nil
	}
	initial := int64(readChunk)
	if contentLength >= 0 {
		initial = contentLength + 1 // +1 to see EOF without growing
	}
	if err := reserve(initial); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, initial)
	for {
		if len(buf) == cap(buf) {
			next := int64(len(buf)) + readChunk
			if next > MaxResponseBytes+readChunk {
				return nil, fmt.Errorf("provider: answer over %d bytes", MaxResponseBytes)
			}
			if err := reserve(next); err != nil {
				return nil, err
			}
			buf = append(buf, make([]byte, readChunk)...)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if len(buf) > MaxResponseBytes {
			return nil, fmt.Errorf("provider: answer over %d bytes", MaxResponseBytes)
		}
		if errors.Is(err, io.EOF) {
			return buf, nil
		}
		if err != nil {
			return nil, fmt.Errorf("provider: read answer: %w", err)
		}
	}
}
