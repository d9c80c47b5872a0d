package comfyui

import (
	"container/heap"
	"slices"
	"time"
)

// The scheduler's index, so that picking a worker costs O(log n) in the
// pool's size rather than a walk over every worker: the eligible workers
// (healthy, with a catalog, not draining) with a free slot in a heap by
// load, those without in a heap by the start of their oldest attempt, and
// the same two heaps per model for the workers whose recent executions
// loaded it. Every change of a worker's slots, load, health, draining or
// models re-files it (reindex, O(models × log n)). The index holds
// snapshots; the live state stays on the worker, and reserve re-checks it.
//
// Classes are checked on the heaps' tops: in a pool whose workers all have
// the job's classes (the usual case) that is the answer; when the top lacks
// one, that heap is searched linearly.

// entry is the scheduler's snapshot of one worker. Guarded by Pool.smu.
type entry struct {
	w        *worker
	eligible bool
	free     bool
	load     float64
	oldest   time.Time
	models   []string
}

// entryHeap is a heap of entries with their positions, so that an entry
// can be fixed or removed in O(log n).
type entryHeap struct {
	items []*entry
	pos   map[*entry]int
	less  func(a, b *entry) bool
}

func newEntryHeap(less func(a, b *entry) bool) *entryHeap {
	return &entryHeap{pos: map[*entry]int{}, less: less}
}

func (h *entryHeap) Len() int           { return len(h.items) }
func (h *entryHeap) Less(i, j int) bool { return h.less(h.items[i], h.items[j]) }
func (h *entryHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.pos[h.items[i]], h.pos[h.items[j]] = i, j
}
func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	h.pos[e] = len(h.items)
	h.items = append(h.items, e)
}
func (h *entryHeap) Pop() any {
	e := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	delete(h.pos, e)
	return e
}

// set files e in the heap (fixing its place) or takes it out.
func (h *entryHeap) set(e *entry, in bool) {
	i, ok := h.pos[e]
	switch {
	case in && ok:
		heap.Fix(h, i)
	case in:
		heap.Push(h, e)
	case ok:
		heap.Remove(h, i)
	}
}

// top returns the first entry whose worker has the classes: the heap's
// top, or (when the top lacks one) the best of a linear search.
func (h *entryHeap) top(classes []string) *entry {
	if len(h.items) == 0 {
		return nil
	}
	if h.items[0].w.hasClasses(classes) {
		return h.items[0]
	}
	var best *entry
	for _, e := range h.items[1:] {
		if (best == nil || h.less(e, best)) && e.w.hasClasses(classes) {
			best = e
		}
	}
	return best
}

func byLoad(a, b *entry) bool {
	if a.load != b.load {
		return a.load < b.load
	}
	return a.w.idx < b.w.idx
}

func byOldest(a, b *entry) bool {
	if !a.oldest.Equal(b.oldest) {
		return a.oldest.Before(b.oldest)
	}
	return a.w.idx < b.w.idx
}

// schedIndex is the index. Guarded by Pool.smu.
type schedIndex struct {
	entries        map[*worker]*entry
	idle, busy     *entryHeap
	idleBy, busyBy map[string]*entryHeap
}

func newSchedIndex() schedIndex {
	return schedIndex{entries: map[*worker]*entry{}, idle: newEntryHeap(byLoad), busy: newEntryHeap(byOldest),
		idleBy: map[string]*entryHeap{}, busyBy: map[string]*entryHeap{}}
}

// reindex re-files w from its live state.
func (p *Pool) reindex(w *worker) {
	p.smu.Lock()
	p.reindexLocked(w)
	p.smu.Unlock()
}

// reindexLocked is reindex with smu held.
func (p *Pool) reindexLocked(w *worker) {
	ix := &p.index
	e := ix.entries[w]
	if e == nil {
		if w.ctx.Err() != nil {
			return // retired
		}
		e = &entry{w: w}
		ix.entries[w] = e
	}
	old := e.models
	w.mu.Lock()
	e.eligible = w.healthy && w.catalog != nil && w.takesJobs()
	e.free = w.inflight < w.cfg.Concurrency
	e.load = float64(max(w.queueRemaining, w.inflight)) / float64(w.cfg.Concurrency)
	e.oldest = time.Time{}
	if len(w.starts) > 0 {
		e.oldest = w.starts[0]
	}
	if !slices.Equal(old, w.models.models) {
		e.models = slices.Clone(w.models.models)
	}
	w.mu.Unlock()
	for _, m := range old {
		if !slices.Contains(e.models, m) {
			ix.file(m, e, false, false)
		}
	}
	idle, busy := e.eligible && e.free, e.eligible && !e.free
	ix.idle.set(e, idle)
	ix.busy.set(e, busy)
	for _, m := range e.models {
		ix.file(m, e, idle, busy)
	}
}

// file places e in model m's heaps.
func (ix *schedIndex) file(m string, e *entry, idle, busy bool) {
	hi, hb := ix.idleBy[m], ix.busyBy[m]
	if hi == nil {
		if !idle && !busy {
			return
		}
		hi, hb = newEntryHeap(byLoad), newEntryHeap(byOldest)
		ix.idleBy[m], ix.busyBy[m] = hi, hb
	}
	hi.set(e, idle)
	hb.set(e, busy)
	if hi.Len() == 0 && hb.Len() == 0 {
		delete(ix.idleBy, m)
		delete(ix.busyBy, m)
	}
}

// unindex forgets a worker that left the pool.
func (p *Pool) unindex(w *worker) {
	p.smu.Lock()
	defer p.smu.Unlock()
	ix := &p.index
	e := ix.entries[w]
	if e == nil {
		return
	}
	ix.idle.set(e, false)
	ix.busy.set(e, false)
	for _, m := range e.models {
		ix.file(m, e, false, false)
	}
	delete(ix.entries, w)
}

// hasClasses reports whether the worker's catalog has every class.
func (w *worker) hasClasses(classes []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range classes {
		if _, ok := w.catalog[c]; !ok {
			return false
		}
	}
	return true
}
