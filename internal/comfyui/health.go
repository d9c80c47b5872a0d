package comfyui

import (
	"fmt"
	"time"

	"go.uber.org/zap"
)

// Health. A worker is healthy (in rotation) once it answered with its
// catalog over a socket, and leaves the rotation:
//
//   - at once when its socket ends without a shutdown notice (a process
//     killed with SIGKILL, a crashed host, a cut link): it takes no new job
//     until a dial succeeds again; the attempts on it go on (a socket that
//     only dropped is redialled and they reconcile with /queue and
//     /history), and are handed on at once if the next dial is refused
//     (the process is gone, and its history with it);
//   - after UnhealthyAfter without any answer (socket and HTTP), when its
//     attempts are handed on;
//   - when its answers cannot be matched to its prompts (markBroken): it
//     stays out until it is seen restarted (a dial fails, then one
//     succeeds) or is added again through the admin API, so that it never
//     runs a prompt nobody follows again.
//
// A shutdown notice is not an outage: the worker drains (shutdown.go).

// markOK records that the worker answered; a worker with a catalog becomes
// healthy unless its socket is down or it is broken.
func (w *worker) markOK() {
	w.mu.Lock()
	w.lastOK = time.Now()
	w.handedOn = false
	became := !w.healthy && w.catalog != nil && !w.socketDown && w.broken == ""
	if became {
		w.healthy = true
		w.reason = ""
	}
	w.mu.Unlock()
	if became {
		w.log.Info("worker is healthy")
		w.pool.becameHealthy()
		w.pool.catalogChanged()
		w.pool.touch(w)
	}
}

// markFailure records a failed contact; a worker silent for UnhealthyAfter
// leaves the rotation and its attempts are lost.
func (w *worker) markFailure(err error) {
	// The catalog as it is (cached per change), kept for a pool whose last
	// worker this is.
	w.pool.unions()
	w.mu.Lock()
	if w.handedOn || time.Since(w.lastOK) < w.pool.cfg.UnhealthyAfter {
		w.mu.Unlock()
		return
	}
	w.handedOn = true
	was := w.healthy
	w.healthy = false
	if w.broken == "" {
		w.reason = fmt.Sprintf("it does not answer (%v)", err)
	}
	w.models.reset() // whatever it held may be gone with it
	lost := w.attemptsLocked()
	w.mu.Unlock()
	if !was && len(lost) == 0 {
		return
	}
	w.log.Warn("worker stopped answering; out of rotation", zap.Error(err))
	for _, a := range lost {
		a.push(event{kind: evLost, err: fmt.Errorf("worker %s stopped answering: %w", w.base.Redacted(), err)})
	}
	w.pool.catalogChanged()
	w.pool.touch(w)
}

// socketUp records a new socket (after dialed: a broken worker seen down
// since is a restarted server and is given another chance).
func (w *worker) socketUp() {
	w.mu.Lock()
	w.conns++
	w.conn = w.conns
	w.socketDown = false
	if w.broken != "" && w.brokenDown {
		w.log.Info("broken worker restarted; trying it again", zap.String("was", w.broken))
		w.broken, w.brokenDown = "", false
	}
	w.mu.Unlock()
}

// socketEnded records the end of the socket; why, when set, is an end
// without a shutdown notice, which takes the worker out of rotation at
// once.
func (w *worker) socketEnded(why string) {
	w.mu.Lock()
	w.conn = 0
	w.mu.Unlock()
	if why != "" {
		w.outage(why, nil)
	}
}

// unhealthyNow takes a worker out of rotation at once for why, and hands
// its attempts on with err (a refused dial: nothing there can finish).
func (w *worker) unhealthyNow(why string, err error) {
	for _, a := range w.outage(why, err) {
		a.push(event{kind: evLost, err: err})
	}
}

// outage takes w out of rotation until a dial succeeds; with handOn set
// it returns the attempts to hand on (once per outage).
func (w *worker) outage(why string, handOn error) []*attempt {
	w.mu.Lock()
	w.socketDown = true
	was := w.healthy
	w.healthy = false
	if w.broken == "" {
		w.reason = why
	}
	var lost []*attempt
	if handOn != nil {
		w.handedOn = true
		lost = w.attemptsLocked()
	}
	w.mu.Unlock()
	if was {
		w.log.Warn("worker out of rotation until a dial succeeds", zap.String("reason", why))
		w.pool.catalogChanged()
		w.pool.touch(w)
	}
	return lost
}

// markBroken takes a worker whose answers cannot be matched to its prompts
// out of rotation (see the top of this file).
func (w *worker) markBroken(why string) {
	w.mu.Lock()
	first := w.broken == ""
	w.broken, w.brokenDown = why, false
	w.reason = "its answers cannot be matched to its prompts: " + why
	was := w.healthy
	w.healthy = false
	w.mu.Unlock()
	if first {
		w.log.Error("worker out of rotation: its answers cannot be matched to its prompts (is it a ComfyUI, and not behind a proxy that rewrites them?)",
			zap.String("reason", why))
	}
	if was {
		w.pool.catalogChanged()
		w.pool.touch(w)
	}
}

// attemptsLocked lists the attempts on w. Called with w.mu held.
func (w *worker) attemptsLocked() []*attempt {
	as := make([]*attempt, 0, len(w.attempts))
	for _, a := range w.attempts {
		as = append(as, a)
	}
	return as
}
