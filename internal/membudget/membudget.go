// Package membudget bounds the memory one kind of work holds at once in a
// process: a Budget of bytes that work takes before it allocates and gives
// back when it is done, waiting its turn (first come, first served) when
// the budget is in use.
//
// Go frees memory only when the garbage collector runs, and by default it
// runs when the heap has doubled since the last collection: work that
// drops a 1 GiB tensor and allocates another would hold both. Dropped
// counts what work let go of and collects once enough has accumulated, so
// that what the process holds follows what the budget accounts.
package membudget

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/dustin/go-humanize"
	"golang.org/x/sync/semaphore"
)

// Budget is a number of bytes to take and give back. A nil *Budget is
// unbounded: every take succeeds and nothing is counted.
type Budget struct {
	limit   int64
	sem     *semaphore.Weighted
	inUse   atomic.Int64
	garbage atomic.Int64
	slack   int64
	gc      sync.Mutex
}

// ErrOverLimit is a take larger than the whole budget: it can never be
// served.
var ErrOverLimit = errors.New("membudget: more than the whole budget")

// New returns a budget of limit bytes (at least 1).
func New(limit int64) *Budget {
	limit = max(limit, 1)
	return &Budget{limit: limit, sem: semaphore.NewWeighted(limit), slack: max(16<<20, limit/16)}
}

// Limit is the budget's size; 0 for a nil budget.
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// InUse is how much is taken now.
func (b *Budget) InUse() int64 {
	if b == nil {
		return 0
	}
	return b.inUse.Load()
}

// Acquire takes n bytes, waiting until they are free and every earlier
// waiter was served, or until ctx ends (its error is returned and nothing
// is taken). More than the whole budget is refused at once with an error
// wrapping ErrOverLimit.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if b == nil || n <= 0 {
		return nil
	}
	if n > b.limit {
		return fmt.Errorf("%w: %s of %s", ErrOverLimit, humanize.IBytes(uint64(n)), humanize.IBytes(uint64(b.limit)))
	}
	if err := b.sem.Acquire(ctx, n); err != nil {
		return err
	}
	b.inUse.Add(n)
	return nil
}

// TryAcquire takes n bytes if they are free now and nobody is waiting.
func (b *Budget) TryAcquire(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	if n > b.limit || !b.sem.TryAcquire(n) {
		return false
	}
	b.inUse.Add(n)
	return true
}

// Release gives back n bytes taken earlier.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	b.inUse.Add(-n)
	b.sem.Release(n)
}

// Dropped records that n bytes the work held are no longer referenced.
// Once a sixteenth of the budget (at least 16 MiB) has been dropped since
// the last collection, it collects before returning, so that the next
// allocation reuses that memory instead of growing the heap. A collection
// another goroutine started before these bytes were dropped may have seen
// them still referenced, so Dropped waits for it and collects again unless
// a collection that started after the drop took them. Only heap objects
// with pointers are scanned, so a collection among large pixel buffers is
// quick.
func (b *Budget) Dropped(n int64) {
	if b == nil || n <= 0 || b.garbage.Add(n) < b.slack {
		return
	}
	b.gc.Lock()
	defer b.gc.Unlock()
	if b.garbage.Load() < b.slack {
		return // a collection that started after the drop took it
	}
	b.garbage.Store(0)
	runtime.GC()
}
