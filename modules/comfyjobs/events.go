package comfyjobs

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// Stream timing. Clients (the official SDKs) treat 45 s of silence as a dead
// stream, so keepalives come well within that; the reconcile poll re-reads
// the job (once per job, for all its streams) so a lost bus event (or a
// lagging subscriber) only delays a frame. A write that its client does not
// take within writeTimeout cuts that stream (sink.go); since every stream is
// written at least every keepaliveInterval, a client that stops reading is
// cut at most keepaliveInterval+writeTimeout after it stopped. One watch
// writes to all of a job's streams in turn, so such a client holds the
// others up for at most writeTimeout.
const (
	keepaliveInterval = 15 * time.Second
	reconcileInterval = 10 * time.Second
	writeTimeout      = 10 * time.Second
	tooManyRetryAfter = 5
)

// reconcileEvery spreads the watches' re-reads over 75–125 % of the interval, so
// that thousands of streams opened together do not poll together.
func reconcileEvery() time.Duration {
	return reconcileInterval*3/4 + rand.N(reconcileInterval/2)
}

// countedStream counts an admitted stream in event_streams_open until
// it is released (once, however many times release is called).
func countedStream(release func()) func() {
	metrics.StreamsOpen.Inc()
	var once sync.Once
	return func() {
		once.Do(func() {
			metrics.StreamsOpen.Dec()
			release()
		})
	}
}

// stream is one client's view of one job: its sink and what it has been
// sent. Its job's watch goroutine is the only one that uses it.
type stream struct {
	sink  sink
	links httpx.Links
	// sent remembers which outputs the client has seen, so that every
	// output reaches it before the terminal status, once. Nil until the
	// first output: most streams wait on jobs that have none yet.
	sent       map[string]bool
	lastStatus string
	lastPos    int
}

// sseFrame renders one event.
func sseFrame(event string, data any) ([]byte, error) {
	payload, ok := data.(json.RawMessage)
	// An event's payload is JSON already, which json.Marshal would only
	// copy (twice, growing its buffer): for a preview, megabytes of base64
	// per frame and stream. It must be one line; Marshal compacts it.
	if !ok || bytes.ContainsAny(payload, "\r\n") || !json.Valid(payload) {
		var err error
		if payload, err = json.Marshal(data); err != nil {
			return nil, err
		}
	}
	b := make([]byte, 0, len(event)+len(payload)+16)
	b = append(b, "event: "...)
	b = append(b, event...)
	b = append(b, "\ndata: "...)
	b = append(b, payload...)
	return append(b, "\n\n"...), nil
}

func (s *stream) frame(event string, data any) error {
	b, err := sseFrame(event, data)
	if err != nil {
		return err
	}
	return s.sink.send(b)
}

// events serves GET /api/v2/jobs/{id}/events: a status snapshot (with the
// latest progress and the outputs so far), then live frames, ending after
// the terminal status. Once the headers are out the stream belongs to the
// job's watch (hub.go); on HTTP/1.1 the connection is parked there and this
// goroutine returns at once.
func (h *Handler) events(w http.ResponseWriter, r *http.Request, svc *jobs.Service, p principal.Principal, scope *deployments.Scope, id string) error {
	if _, err := svc.Get(r.Context(), p.AccountID, id); err != nil {
		return err
	}
	key, max := p.AccountID, 0
	if scope != nil && scope.Public() {
		// Anonymous callers share the demo's own, small allowance.
		key, max = "\x00demo "+scope.ID, scope.Demo.MaxStreams
	}
	// The account's ComfyUI sockets count too (max_streams is one bound).
	release, ok := h.app.Streams().Acquire(key, max)
	if !ok {
		return apierr.New(http.StatusTooManyRequests, "too_many_streams",
			"too many open event streams; close one or poll the job instead").WithRetryAfter(tooManyRetryAfter)
	}
	release = countedStream(release)
	hdr := w.Header()
	hdr.Set("Content-Type", "text/event-stream")
	hdr.Set("Cache-Control", "no-cache")
	hdr.Set("X-Accel-Buffering", "no")
	if r.ProtoMajor == 1 {
		// A parked stream's connection closes when the stream ends; the
		// client must not reuse it for its next request.
		hdr.Set("Connection", "close")
	}
	w.WriteHeader(http.StatusOK)
	ws := newWriterSink(w)
	if err := ws.send(nil); err != nil {
		release()
		return nil
	}
	s := &stream{links: h.links(r), lastPos: -1}
	if parked, ok := park(w, r, release); ok {
		s.sink = parked
		h.hub.attach(svc, p.AccountID, id, s)
		return nil
	}
	defer release()
	s.sink = ws
	h.hub.attach(svc, p.AccountID, id, s)
	ws.serveWriter(r)
	return nil
}

// snapshot sends the state on connect. A job that already ended gets its
// outputs and then its terminal status.
func (s *stream) snapshot(j storage.Job, pos *int, b bus.Bus) (done bool, err error) {
	if storage.Terminal(j.Status) {
		return s.finish(j)
	}
	if err := s.status(j, pos); err != nil {
		return false, err
	}
	if len(j.Progress) > 0 {
		if err := s.frame("progress", json.RawMessage(j.Progress)); err != nil {
			return false, err
		}
	}
	if p, ok := b.LatestPreview(j.ID); ok {
		if err := s.frame("preview", p.Data); err != nil {
			return false, err
		}
	}
	return false, s.outputs(j)
}

// update sends what changed in a re-read job.
func (s *stream) update(j storage.Job, pos *int) (done bool, err error) {
	if storage.Terminal(j.Status) {
		return s.finish(j)
	}
	if err := s.outputs(j); err != nil {
		return false, err
	}
	return false, s.status(j, pos)
}

// finish sends outputs not yet seen, then the terminal status.
func (s *stream) finish(j storage.Job) (bool, error) {
	if err := s.outputs(j); err != nil {
		return true, err
	}
	return true, s.status(j, nil)
}

// status sends the job object as a status frame when its status or queue
// position changed since the last one.
func (s *stream) status(j storage.Job, pos *int) error {
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
	now := time.Now()
	for _, o := range j.Outputs {
		if err := s.output(o, j.ID, now); err != nil {
			return err
		}
	}
	return nil
}

// output sends o unless the client has seen it.
func (s *stream) output(o storage.Output, jobID string, now time.Time) error {
	if s.sent[o.Asset.ID] {
		return nil
	}
	if s.sent == nil {
		s.sent = map[string]bool{}
	}
	s.sent[o.Asset.ID] = true
	return s.frame("output", outputView(o, jobID, s.links, now))
}
