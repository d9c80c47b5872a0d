package comfyjobs

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/comfygate/comfygate/modules/apierr"
	"github.com/comfygate/comfygate/modules/httpx"
	"github.com/comfygate/comfygate/modules/jobs"
	"github.com/comfygate/comfygate/modules/principal"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// Stream timing. Clients (the official SDKs) treat 45 s of silence as a dead
// stream, so keepalives come well within that; the reconcile poll re-reads
// the job so a lost bus event (or a lagging subscriber) only delays a frame.
const (
	keepaliveInterval = 15 * time.Second
	reconcileInterval = 10 * time.Second
	writeTimeout      = 30 * time.Second
	tooManyRetryAfter = 5
)

// reconcileEvery spreads streams' re-reads over 75–125 % of the interval, so
// that thousands of streams opened together do not poll together.
func reconcileEvery() time.Duration {
	return reconcileInterval*3/4 + rand.N(reconcileInterval/2)
}

// streamLimiter bounds the streams one account holds open in this process.
type streamLimiter struct {
	max  int
	mu   sync.Mutex
	open map[string]int
}

func newStreamLimiter(max int) *streamLimiter {
	return &streamLimiter{max: max, open: map[string]int{}}
}

func (l *streamLimiter) acquire(account string) (release func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[account] >= l.max {
		return nil, false
	}
	l.open[account]++
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.open[account]--; l.open[account] <= 0 {
			delete(l.open, account)
		}
	}, true
}

// sse writes server-sent events with a write deadline and a flush per frame.
type sse struct {
	w  http.ResponseWriter
	rc *http.ResponseController
}

func (s *sse) frame(event string, data any) error {
	payload, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return s.raw(fmt.Sprintf("event: %s\ndata: %s\n\n", event, payload))
}

func (s *sse) raw(text string) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := s.w.Write([]byte(text)); err != nil {
		return err
	}
	return s.rc.Flush()
}

// stream is one client's view of one job.
type stream struct {
	*sse
	r       *http.Request
	svc     *jobs.Service
	account string
	jobID   string
	links   httpx.Links
	// sentOutputs remembers which outputs the client has seen, so that every
	// output reaches it before the terminal status, once.
	sentOutputs map[string]bool
	lastStatus  string
	lastPos     int
}

// events serves GET /api/v2/jobs/{id}/events: a status snapshot (with the
// latest progress and the outputs so far), then live frames, ending after
// the terminal status.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, svc *jobs.Service, p principal.Principal, id string) error {
	if _, err := svc.Get(r.Context(), p.AccountID, id); err != nil {
		return err
	}
	release, ok := h.streams.acquire(p.AccountID)
	if !ok {
		return apierr.New(http.StatusTooManyRequests, "too_many_streams",
			"too many open event streams; close one or poll the job instead").WithRetryAfter(tooManyRetryAfter)
	}
	defer release()
	// Subscribe before reading the snapshot, so nothing falls between them.
	sub := svc.Bus.Subscribe(id)
	defer sub.Cancel()
	j, err := svc.Get(r.Context(), p.AccountID, id)
	if err != nil {
		return err
	}

	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &stream{sse: &sse{w: w, rc: http.NewResponseController(w)}, r: r, svc: svc,
		account: p.AccountID, jobID: id, links: httpx.LinksFor(r), sentOutputs: map[string]bool{}, lastPos: -1}

	done, err := s.snapshot(j)
	if err != nil || done {
		return nil
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	reconcile := time.NewTicker(reconcileEvery())
	defer reconcile.Stop()
	for {
		select {
		case <-r.Context().Done():
			return nil
		case <-h.app.Stopping():
			return nil
		case <-keepalive.C:
			err = s.raw(": keepalive\n\n")
		case <-reconcile.C:
			done, err = s.refresh()
		case e := <-sub.C:
			if sub.Lagged() {
				done, err = s.refresh()
			} else {
				done, err = s.deliver(e)
			}
		}
		if err != nil || done {
			return nil
		}
	}
}

// snapshot sends the state on connect. A job that already ended gets its
// outputs and then its terminal status.
func (s *stream) snapshot(j storage.Job) (done bool, err error) {
	if storage.Terminal(j.Status) {
		return s.finish(j)
	}
	if err := s.status(j); err != nil {
		return false, err
	}
	if len(j.Progress) > 0 {
		if err := s.frame("progress", json.RawMessage(j.Progress)); err != nil {
			return false, err
		}
	}
	if p, ok := s.svc.Bus.LatestPreview(j.ID); ok {
		if err := s.frame("preview", p.Data); err != nil {
			return false, err
		}
	}
	return false, s.outputs(j)
}

// deliver forwards one bus event.
func (s *stream) deliver(e bus.Event) (done bool, err error) {
	switch e.Kind {
	case "progress", "preview":
		return false, s.frame(e.Kind, e.Data)
	case "output":
		var o storage.Output
		if json.Unmarshal(e.Data, &o) != nil || s.sentOutputs[o.Asset.ID] {
			return false, nil
		}
		s.sentOutputs[o.Asset.ID] = true
		return false, s.frame("output", outputView(o, e.JobID, s.links, time.Now()))
	case "status":
		return s.refresh()
	}
	return false, nil
}

// refresh re-reads the job and sends what changed.
func (s *stream) refresh() (done bool, err error) {
	j, err := s.svc.Get(s.r.Context(), s.account, s.jobID)
	if err != nil {
		return true, nil // gone, or storage failing: end; the client re-polls
	}
	if storage.Terminal(j.Status) {
		return s.finish(j)
	}
	if err := s.outputs(j); err != nil {
		return false, err
	}
	return false, s.status(j)
}

// finish sends outputs not yet seen, then the terminal status.
func (s *stream) finish(j storage.Job) (bool, error) {
	if err := s.outputs(j); err != nil {
		return true, err
	}
	return true, s.status(j)
}

// status sends the job object as a status frame when its status or queue
// position changed since the last one.
func (s *stream) status(j storage.Job) error {
	pos, err := s.svc.QueuePosition(s.r.Context(), j)
	if err != nil {
		return err
	}
	p := 0
	if pos != nil {
		p = *pos
	}
	if j.Status == s.lastStatus && p == s.lastPos {
		return nil
	}
	s.lastStatus, s.lastPos = j.Status, p
	return s.frame("status", jobView(j, pos, s.links, time.Now()))
}

func (s *stream) outputs(j storage.Job) error {
	for _, o := range j.Outputs {
		if s.sentOutputs[o.Asset.ID] {
			continue
		}
		s.sentOutputs[o.Asset.ID] = true
		if err := s.frame("output", outputView(o, j.ID, s.links, time.Now())); err != nil {
			return err
		}
	}
	return nil
}
