package builtin

import (
	"context"
	"fmt"

	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/internal/membudget"
)

// memory is one run's account of what it holds: every tensor from the node
// that allocates it until the last node that reads it has run, and what a
// node allocates while it runs (a decoded file, an encoded PNG, the
// temporaries of a resize) until it returns. The bytes are taken from the
// process's budget: the run's estimated peak at its start (waiting for it
// when other runs hold the budget), anything beyond that as it is charged
// (without waiting: a run that holds memory and waits for more could wait
// on another that does the same). Allocations of a few kilobytes (filter
// taps, row buffers, kernels) are not counted.
type memory struct {
	budget   *membudget.Budget
	limit    int64 // bound of used; 0: none
	reserved int64 // taken from budget
	used     int64
	peak     int64
	// garbage is what was released since the last collect: memory that
	// nothing should reference any more, but the caller that released it
	// may still (see collect).
	garbage int64
	// held are the tensors the run's results hold, by identity (*Image,
	// *Mask, or an estimate's *tensor), with how many result slots hold
	// each: a node that passes its input through holds the same tensor.
	held map[any]*heldTensor
}

type heldTensor struct {
	bytes int64
	refs  int
}

func newMemory(budget *membudget.Budget, limit int64) *memory {
	if l := budget.Limit(); l > 0 && (limit <= 0 || limit > l) {
		limit = l
	}
	return &memory{budget: budget, limit: limit, held: map[any]*heldTensor{}}
}

// MemoryError is a workflow that needs more memory than a built-in job may
// hold (Busy: than the process's budget for built-in jobs has free now).
type MemoryError struct {
	NodeID, ClassType string
	// Need is what the run would hold at that node; Limit what it may.
	Need, Limit int64
	Busy        bool
}

func (e *MemoryError) Error() string {
	if e.Busy {
		return fmt.Sprintf("the workflow needs %s of memory by this node, more than the gateway has free for built-in jobs now; retry later",
			humanize.IBytes(uint64(e.Need)))
	}
	return fmt.Sprintf("the workflow needs %s of memory by this node, over the %s one job may use",
		humanize.IBytes(uint64(e.Need)), humanize.IBytes(uint64(e.Limit)))
}

// reserve takes need bytes from the budget before the run starts, calling
// onWait first when it has to wait for them.
func (m *memory) reserve(ctx context.Context, need int64, onWait func(need int64)) error {
	if need <= 0 {
		return nil
	}
	if !m.budget.TryAcquire(need) {
		if onWait != nil {
			onWait(need)
		}
		if err := m.budget.Acquire(ctx, need); err != nil {
			return err
		}
	}
	m.reserved = need
	return nil
}

// close gives the reservation back, once what the run held is collected:
// the next run to take it allocates into that memory.
func (m *memory) close() {
	clear(m.held)
	m.budget.Dropped(m.used + m.garbage)
	m.budget.Release(m.reserved)
	m.reserved, m.used, m.garbage = 0, 0, 0
}

// collect hands what was released to the budget's collector. The executor
// calls it between nodes, once nothing references what its nodes and the
// retired results let go of: a collection while a variable still holds a
// tensor would free nothing.
func (m *memory) collect() {
	m.budget.Dropped(m.garbage)
	m.garbage = 0
}

// charge accounts n bytes about to be allocated.
func (m *memory) charge(n int64) error {
	if n <= 0 {
		return nil
	}
	if m.limit > 0 && m.used+n > m.limit {
		return &MemoryError{Need: m.used + n, Limit: m.limit}
	}
	if grow := m.used + n - m.reserved; grow > 0 {
		if !m.budget.TryAcquire(grow) {
			return &MemoryError{Need: m.used + n, Limit: m.limit, Busy: true}
		}
		m.reserved += grow
	}
	m.used += n
	m.peak = max(m.peak, m.used)
	return nil
}

// release accounts n bytes that are no longer needed (collect hands them
// to the collector).
func (m *memory) release(n int64) {
	if n <= 0 {
		return
	}
	m.used -= n
	m.garbage += n
}

// keep settles a node that allocated charged bytes and returned out: the
// tensors of out that no result holds yet are what it keeps of the charge,
// the rest was its temporaries. A node that kept more than it charged
// (a cost that fell short) is charged the difference now.
func (m *memory) keep(out []any, charged int64) error {
	var kept int64
	for _, v := range out {
		n, ok := tensorBytes(v)
		if !ok {
			continue
		}
		if h := m.held[v]; h != nil {
			h.refs++
			continue
		}
		m.held[v] = &heldTensor{bytes: n, refs: 1}
		kept += n
	}
	if kept > charged {
		return m.charge(kept - charged)
	}
	m.release(charged - kept)
	return nil
}

// drop releases the tensors of a node's outputs once no result holds them.
func (m *memory) drop(out []any) {
	for _, v := range out {
		h := m.held[v]
		if h == nil {
			continue
		}
		if h.refs--; h.refs == 0 {
			delete(m.held, v)
			m.release(h.bytes)
		}
	}
}

// tensorBytes is the size of a tensor value: an *Image, a *Mask, or an
// estimate's *tensor.
func tensorBytes(v any) (int64, bool) {
	switch t := v.(type) {
	case *Image:
		return 4 * int64(len(t.Pix)), true
	case *Mask:
		return 4 * int64(len(t.Pix)), true
	case *tensor:
		return t.bytes(), true
	}
	return 0, false
}
