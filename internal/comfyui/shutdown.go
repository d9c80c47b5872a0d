package comfyui

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/coder/websocket"
	"go.uber.org/zap"
)

// Shutdown notices. A ComfyUI server that is being stopped (SIGTERM, a
// pod's termination) tells its clients in one of two ways: it closes its
// sockets with 1001 (going away) or 1012 (service restart), or the socket
// just ends and the next dial is refused. Either is a shutdown notice: the
// worker stops taking jobs at once (rather than after UnhealthyAfter, when
// every job sent to it meanwhile would be lost) while the attempts it runs
// go on. A worker that keeps serving (a graceful stop that finishes its
// queue) lets them finish; one whose dials are refused cannot report them
// (its history lives in its memory), so they are handed on at once
// (jobs.WorkerLostError). The worker takes jobs again once it was seen
// down (a failed dial) and then answers again: a restarted server. It stays
// in the pool: only its source (the admin API, DNS) removes it.

// takesJobs reports whether the scheduler may give w new jobs (health
// aside). Called with w.mu held.
func (w *worker) takesJobs() bool { return !w.draining && !w.stopping }

// shutdownClose reports whether a socket's end is a shutdown notice.
func shutdownClose(err error) bool {
	switch websocket.CloseStatus(err) {
	case websocket.StatusGoingAway, websocket.StatusServiceRestart:
		return true
	}
	return false
}

// refused reports whether a dial failed because nothing listens.
func refused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// shutdownNotice takes w out of rotation until it is seen down and back.
func (w *worker) shutdownNotice(why string) {
	w.mu.Lock()
	was := w.stopping
	took := w.takesJobs()
	w.stopping = true
	w.seenDown = false
	w.pool.capacityChanged(w, took)
	w.mu.Unlock()
	if !was {
		w.log.Info("worker is shutting down; it takes no new job", zap.String("notice", why))
		w.pool.touch(w)
	}
}

// dialFailed records a failed dial. A dial refused by a worker that was
// connected before is a shutdown notice, and the attempts on it cannot
// finish: they are handed on now.
func (w *worker) dialFailed(err error, wasConnected bool) {
	if !wasConnected || !refused(err) {
		w.mu.Lock()
		if w.stopping {
			w.seenDown = true
		}
		w.mu.Unlock()
		return
	}
	w.shutdownNotice("dial refused")
	w.mu.Lock()
	w.seenDown = true
	lost := make([]*attempt, 0, len(w.attempts))
	for _, a := range w.attempts {
		lost = append(lost, a)
	}
	w.mu.Unlock()
	for _, a := range lost {
		a.push(event{kind: evLost, err: fmt.Errorf("worker %s shut down: %w", w.base.Redacted(), err)})
	}
}

// dialed records a successful dial: a stopping worker seen down since its
// notice is a restarted server and takes jobs again.
func (w *worker) dialed() {
	w.mu.Lock()
	back := w.stopping && w.seenDown
	if back {
		took := w.takesJobs()
		w.stopping, w.seenDown = false, false
		w.pool.capacityChanged(w, took)
	}
	w.mu.Unlock()
	if back {
		w.log.Info("worker is back after its shutdown; in rotation")
		w.pool.touch(w)
	}
}
