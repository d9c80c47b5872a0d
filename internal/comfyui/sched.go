package comfyui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/jobs"
)

// Scheduling. Every Execute call becomes a waiter in arrival order; the
// scheduler runs whenever a worker's state changes (a slot frees, health or
// catalog changes) and when a waiter arrives or its affinity wait ends. It
// walks the waiters oldest first and gives each the best worker it may take
// now:
//
//   - an idle worker (one with a free slot) whose recent executions loaded
//     the most of the job's models, the least loaded among equals;
//   - else, if a busy worker holds some of them, the waiter has waited
//     less than AffinityWait, and that worker should be free before a cold
//     load would be done (estimated from the moving averages of warm and
//     cold attempt times, counting the older waiters holding out for the
//     same models), nothing yet: it keeps its place and younger waiters may
//     take the idle workers it passes over;
//   - else the least loaded idle worker.
//
// A waiter past its affinity wait takes any idle worker before every
// younger waiter, so no job starves. With DispatchLeastBusy every waiter
// takes the least loaded idle worker.

// waiter is one Execute call waiting for a worker.
type waiter struct {
	classes []string
	models  []string
	// until is when the waiter stops holding out for a warm worker.
	until time.Time
	// noneSince is when the scheduler last found no healthy worker with
	// the classes (zero while one exists).
	noneSince time.Time
	got       *worker
	// warm: got held all of the job's models.
	warm bool
	done chan struct{} // closed once got is set
}

// acquire reserves a slot on a worker that has every class, by the policy
// above. When no healthy worker has the classes for UnhealthyAfter it
// returns jobs.WorkerLostError.
func (p *Pool) acquire(ctx context.Context, classes, models []string) (w *worker, warm bool, err error) {
	now := time.Now()
	wt := &waiter{classes: classes, models: models, done: make(chan struct{})}
	if p.cfg.Dispatch == DispatchAffinity && len(models) > 0 {
		wt.until = now.Add(p.cfg.AffinityWait)
	}
	p.smu.Lock()
	p.waiters = append(p.waiters, wt)
	p.smu.Unlock()
	p.schedule()
	for {
		p.smu.Lock()
		noneSince := wt.noneSince
		p.smu.Unlock()
		now := time.Now()
		wait := p.cfg.UnhealthyAfter
		if !noneSince.IsZero() {
			if now.Sub(noneSince) >= p.cfg.UnhealthyAfter {
				if w := p.abandon(wt); w != nil {
					return w, wt.warm, nil
				}
				return nil, false, &jobs.WorkerLostError{Err: fmt.Errorf("no healthy ComfyUI worker has the classes %v", classes)}
			}
			wait = p.cfg.UnhealthyAfter - now.Sub(noneSince)
		}
		if d := wt.until.Sub(now); d > 0 && d < wait {
			wait = d
		}
		timer := time.NewTimer(wait)
		select {
		case <-wt.done:
			timer.Stop()
			return wt.got, wt.warm, nil
		case <-ctx.Done():
			timer.Stop()
			if w := p.abandon(wt); w != nil {
				w.release()
			}
			return nil, false, ctx.Err()
		case <-p.ctx.Done():
			timer.Stop()
			if w := p.abandon(wt); w != nil {
				w.release()
			}
			return nil, false, &jobs.WorkerLostError{Err: errPoolClosed}
		case <-timer.C:
			p.schedule()
		}
	}
}

// abandon removes wt from the waiters; it returns the worker the scheduler
// gave wt meanwhile, if any, which the caller owns.
func (p *Pool) abandon(wt *waiter) *worker {
	p.smu.Lock()
	defer p.smu.Unlock()
	for i, x := range p.waiters {
		if x == wt {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return nil
		}
	}
	return wt.got
}

// schedule hands idle workers to waiters, oldest first.
func (p *Pool) schedule() {
	p.smu.Lock()
	defer p.smu.Unlock()
	if len(p.waiters) == 0 {
		return
	}
	now := time.Now()
	kept := p.waiters[:0]
	holding := map[string]int{}
	for _, wt := range p.waiters {
		w := p.choose(wt, now, holding)
		if w == nil {
			kept = append(kept, wt)
			continue
		}
		wt.got = w
		close(wt.done)
	}
	clear(p.waiters[len(kept):])
	p.waiters = kept
}

// choose reserves the worker wt should take now, nil when none. holding
// counts, by model set, the older waiters of this pass that hold out for a
// warm worker. It reads the index (schedindex.go): O(models × log n).
// Called with smu held.
func (p *Pool) choose(wt *waiter, now time.Time, holding map[string]int) *worker {
	ix := &p.index
	best := ix.idle.top(wt.classes)
	var bestWarm *entry
	bestWarmHeld, warmBusy := 0, 0
	var soonest time.Time // the oldest attempt on a busy warm worker
	for _, m := range wt.models {
		if h := ix.idleBy[m]; h != nil {
			if e := h.top(wt.classes); e != nil {
				held := countHeld(e.models, wt.models)
				if held > bestWarmHeld || held == bestWarmHeld && e.load < bestWarm.load {
					bestWarm, bestWarmHeld = e, held
				}
			}
		}
		if h := ix.busyBy[m]; h != nil && h.Len() > 0 {
			warmBusy += h.Len()
			if o := h.items[0].oldest; soonest.IsZero() || o.Before(soonest) {
				soonest = o
			}
		}
	}
	if best == nil && ix.busy.top(wt.classes) == nil {
		// No healthy worker has the classes.
		if wt.noneSince.IsZero() {
			wt.noneSince = now
		}
		return nil
	}
	switch {
	case p.cfg.Dispatch == DispatchLeastBusy:
	case bestWarm != nil:
		best = bestWarm
	case warmBusy > 0 && now.Before(wt.until) && p.worthWaiting(wt, now, soonest, warmBusy, holding):
		best = nil // hold out for the warm worker
	}
	wt.noneSince = time.Time{}
	if best == nil {
		return nil
	}
	ok := best.w.reserve(wt.models)
	p.reindexLocked(best.w)
	if !ok {
		return nil // its state changed; the change's notify schedules again
	}
	wt.warm = best == bestWarm && bestWarmHeld == len(wt.models)
	return best.w
}

// countHeld counts how many of want are in held.
func countHeld(held, want []string) int {
	n := 0
	for _, m := range want {
		if slices.Contains(held, m) {
			n++
		}
	}
	return n
}

// worthWaiting reports whether a warm worker should be free before a cold
// load would be done: the oldest attempt on the busy warm workers ends
// after a warm attempt's time, and each older waiter holding out for the
// same models takes a warm attempt's time of one of them. Until both warm
// and cold attempts were timed, waiting (within AffinityWait) is worth it.
func (p *Pool) worthWaiting(wt *waiter, now, soonest time.Time, warmBusy int, holding map[string]int) bool {
	key := strings.Join(wt.models, "\x00")
	ahead := holding[key]
	warm, penalty, ok := p.times.estimates()
	if ok {
		free := max(soonest.Add(warm).Sub(now), 0) + time.Duration(ahead)*warm/time.Duration(warmBusy)
		if free >= penalty {
			return false
		}
	}
	holding[key]++
	return true
}
