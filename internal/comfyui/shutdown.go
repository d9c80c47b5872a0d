package comfyui

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/coder/websocket"
	"go.uber.org/zap"
)

// Shutdown notices. A ComfyUI server that is being stopped gracefully (a
// proxy or supervisor in front of it on SIGTERM, a pod's termination)
// closes its sockets with 1001 (going away) or 1012 (service restart).
// That is a shutdown notice: the worker stops taking jobs at once (rather
// than after UnhealthyAfter, when every job sent to it meanwhile would be
// lost) while the attempts it runs go on. A worker that keeps serving (a
// graceful stop that finishes its queue) lets them finish; one whose dials
// are refused cannot report them (its history lives in its memory), so
// they are handed on at once (jobs.WorkerLostError). The worker takes jobs
// again once it was seen down (a failed dial) and then answers again: a
// restarted server. It stays in the pool: only its source (the admin API,
// DNS) removes it. A socket that ends without a notice is an outage, not a
// drain (health.go): ComfyUI itself installs no SIGTERM handler, so a
// SIGTERM ends it as a SIGKILL does.

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
// connected before means its process is gone, and the attempts on it
// cannot finish (its history died with it): they are handed on now. The
// worker drains when it had announced its shutdown, and is unhealthy at
// once when it had not (a SIGKILL, a crash).
func (w *worker) dialFailed(err error, wasConnected bool) {
	w.mu.Lock()
	if w.broken != "" {
		w.brokenDown = true
	}
	stopping := w.stopping
	if stopping {
		w.seenDown = true
	}
	w.mu.Unlock()
	if !wasConnected || !refused(err) {
		return
	}
	lost := fmt.Errorf("worker %s shut down: %w", w.base.Redacted(), err)
	if !stopping {
		w.unhealthyNow(fmt.Sprintf("its port refuses connections (%v)", err), lost)
		return
	}
	w.mu.Lock()
	as := w.attemptsLocked()
	w.mu.Unlock()
	for _, a := range as {
		a.push(event{kind: evLost, err: lost})
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
