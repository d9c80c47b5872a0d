package comfyjobs

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// streamHub serves every open event stream of one comfy_jobs handler. The
// streams of one job share a watch: one goroutine, one bus subscription,
// one periodic re-read of the job and one keepalive tick, however many
// clients follow that job. A stream itself is only its sink and what its
// client has been sent.
type streamHub struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	watches map[string]*watch
}

func newStreamHub() *streamHub {
	ctx, cancel := context.WithCancel(context.Background())
	return &streamHub{ctx: ctx, cancel: cancel, watches: map[string]*watch{}}
}

// stop ends every stream and waits for the watches to return.
func (h *streamHub) stop() {
	h.cancel()
	h.wg.Wait()
}

// attach hands s (whose headers are out) to the watch of its job, which
// sends its snapshot and then its live frames. The watch subscribes before
// it reads the snapshot, so nothing falls between them.
func (h *streamHub) attach(svc *jobs.Service, account, jobID string, s *stream) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx.Err() != nil {
		s.sink.end()
		return
	}
	w := h.watches[jobID]
	if w == nil {
		w = &watch{hub: h, svc: svc, account: account, jobID: jobID,
			sub: svc.Bus.Subscribe(jobID), wake: make(chan struct{}, 1)}
		h.watches[jobID] = w
		h.wg.Add(1)
		go w.run()
	}
	w.pending = append(w.pending, s)
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watch follows one job for its streams.
type watch struct {
	hub     *streamHub
	svc     *jobs.Service
	account string // a job has one owner; attach only admits the owner's streams
	jobID   string
	sub     *bus.Subscription
	wake    chan struct{}
	pending []*stream // guarded by hub.mu
	streams []*stream // the watch goroutine's own
}

func (w *watch) run() {
	defer w.hub.wg.Done()
	defer w.sub.Cancel()
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	reconcile := time.NewTimer(reconcileEvery())
	defer reconcile.Stop()
	for {
		select {
		case <-w.hub.ctx.Done():
			w.endAll()
			w.hub.mu.Lock()
			for _, s := range w.pending {
				s.sink.end()
			}
			w.pending = nil
			delete(w.hub.watches, w.jobID)
			w.hub.mu.Unlock()
			return
		case <-w.wake:
			w.admit()
		case <-keepalive.C:
			w.each(func(s *stream) (bool, error) { return false, s.sink.send(keepaliveFrame) })
		case <-reconcile.C:
			w.refresh()
			reconcile.Reset(reconcileEvery())
		case e := <-w.sub.C:
			if w.sub.Lagged() {
				w.refresh()
			} else {
				w.deliver(e)
			}
		}
		if w.retire() {
			return
		}
	}
}

var keepaliveFrame = []byte(": keepalive\n\n")

// admit sends the streams that arrived their snapshot, from one read of
// the job.
func (w *watch) admit() {
	w.hub.mu.Lock()
	arrived := w.pending
	w.pending = nil
	w.hub.mu.Unlock()
	if len(arrived) == 0 {
		return
	}
	j, err := w.svc.Get(w.hub.ctx, w.account, w.jobID)
	if err != nil {
		for _, s := range arrived {
			s.sink.end() // deleted meanwhile, or storage failing: the client re-polls
		}
		return
	}
	pos := w.position(j)
	for _, s := range arrived {
		done, err := s.snapshot(j, pos, w.svc.Bus)
		if err != nil || done {
			s.sink.end()
			continue
		}
		w.streams = append(w.streams, s)
	}
}

// each applies fn to every stream, dropping those that fail or are done.
func (w *watch) each(fn func(s *stream) (done bool, err error)) {
	kept := w.streams[:0]
	for _, s := range w.streams {
		done, err := fn(s)
		if err != nil || done {
			s.sink.end()
			continue
		}
		kept = append(kept, s)
	}
	clear(w.streams[len(kept):])
	w.streams = kept
}

func (w *watch) endAll() {
	for _, s := range w.streams {
		s.sink.end()
	}
	w.streams = nil
}

// deliver forwards one bus event to every stream.
func (w *watch) deliver(e bus.Event) {
	switch e.Kind {
	case "progress", "preview":
		frame, err := sseFrame(e.Kind, e.Data)
		if err != nil {
			return
		}
		w.each(func(s *stream) (bool, error) { return false, s.sink.send(frame) })
	case "output":
		var o storage.Output
		if json.Unmarshal(e.Data, &o) != nil {
			return
		}
		now := time.Now()
		w.each(func(s *stream) (bool, error) { return false, s.output(o, e.JobID, now) })
	case "status":
		w.refresh()
	}
}

// refresh re-reads the job once and sends each stream what it has not
// seen; a terminal job ends them all.
func (w *watch) refresh() {
	if len(w.streams) == 0 {
		return
	}
	j, err := w.svc.Get(w.hub.ctx, w.account, w.jobID)
	if err != nil {
		w.endAll() // gone, or storage failing: end; the clients re-poll
		return
	}
	pos := w.position(j)
	w.each(func(s *stream) (bool, error) { return s.update(j, pos) })
}

// position is the job's queue position, read once for all its streams.
// A failed read leaves it out of this round's frames rather than ending
// the streams.
func (w *watch) position(j storage.Job) *int {
	pos, err := w.svc.QueuePosition(w.hub.ctx, j)
	if err != nil {
		return nil
	}
	return pos
}

// retire removes the watch once it has no streams and none arriving.
func (w *watch) retire() bool {
	if len(w.streams) > 0 {
		return false
	}
	w.hub.mu.Lock()
	defer w.hub.mu.Unlock()
	if len(w.pending) > 0 {
		return false
	}
	delete(w.hub.watches, w.jobID)
	return true
}
