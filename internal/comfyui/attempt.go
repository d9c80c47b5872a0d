package comfyui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/workflow"
)

type eventKind int

const (
	evMessage eventKind = iota
	evPreview
	evReconnected
	evLost
)

// event is what a worker's socket hands an attempt.
type event struct {
	kind eventKind
	// typ and data are a text frame's type and data.
	typ  string
	data json.RawMessage
	// preview frames
	nodeID, contentType string
	image               []byte
	err                 error
}

// attempt is one job attempt on one worker. The worker's reader pushes
// events into an unbounded queue so that a slow output commit never blocks
// the socket that other attempts share.
type attempt struct {
	p     *Pool
	w     *worker
	run   *jobs.Run
	graph workflow.Graph
	// sentID is the prompt_id the attempt sends (attemptID); promptID is
	// the one the worker answered (the same where ComfyUI honours it; see
	// match.go), set under w.mu.
	sentID, promptID string
	// conn is the worker's socket the prompt was submitted on; seen: the
	// worker named the prompt (a message, a /queue or /history entry).
	conn uint64
	seen bool
	log  *zap.Logger
	// logs captures the worker's log output; nil unless the job keeps a
	// run log.
	logs *logCapture

	mu          sync.Mutex
	queue       []event
	signal      chan struct{}
	lastPreview time.Time

	progress    tracker
	committed   map[string]bool
	successSeen bool
	historySeen bool
}

func newAttempt(p *Pool, w *worker, run *jobs.Run, g workflow.Graph) *attempt {
	id := attemptID(run.Job)
	return &attempt{
		p: p, w: w, run: run, graph: g, sentID: id, promptID: id,
		log:       w.log.With(zap.String("job_id", run.Job.ID)),
		signal:    make(chan struct{}, 1),
		committed: map[string]bool{},
		logs:      newLogCapture(run.Log),
	}
}

func (a *attempt) push(e event) {
	a.mu.Lock()
	a.queue = append(a.queue, e)
	a.mu.Unlock()
	select {
	case a.signal <- struct{}{}:
	default:
	}
}

// offerPreview queues a preview unless one was queued less than
// previewInterval ago.
func (a *attempt) offerPreview(nodeID, contentType string, img []byte) {
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.lastPreview) < previewInterval {
		a.mu.Unlock()
		return
	}
	a.lastPreview = now
	a.mu.Unlock()
	a.push(event{kind: evPreview, nodeID: nodeID, contentType: contentType, image: img})
}

func (a *attempt) drain() []event {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := a.queue
	a.queue = nil
	return q
}

// follow turns the prompt's events into progress, previews and outputs
// until it ends. Every wait is bounded: events, ctx, the pool's life, and a
// reconciliation with /queue and /history whenever the socket was quiet.
func (a *attempt) follow(ctx context.Context) error {
	quietEvery := max(2*a.p.cfg.healthInterval(), time.Second)
	quiet := time.NewTimer(quietEvery)
	defer quiet.Stop()
	for {
		select {
		case <-ctx.Done():
			return a.cancelRun(ctx)
		case <-a.p.ctx.Done():
			return &jobs.WorkerLostError{Err: errPoolClosed}
		case <-a.signal:
			for _, e := range a.drain() {
				if done, err := a.handle(ctx, e); done {
					return err
				}
			}
		case <-quiet.C:
			if done, err := a.reconcile(ctx); done {
				return err
			}
		}
		if !quiet.Stop() {
			select {
			case <-quiet.C:
			default:
			}
		}
		quiet.Reset(quietEvery)
	}
}

// handle applies one event; done reports that the attempt is over.
func (a *attempt) handle(ctx context.Context, e event) (done bool, err error) {
	switch e.kind {
	case evLost:
		return true, &jobs.WorkerLostError{Err: e.err}
	case evReconnected:
		return a.reconcile(ctx)
	case evPreview:
		node := e.nodeID
		if node == "" {
			node = a.progress.current
		}
		if a.run.Preview != nil {
			a.run.Preview(node, e.contentType, e.image)
		}
		return false, nil
	}
	a.seen = true
	var d struct {
		Node   *string                    `json:"node"`
		Nodes  json.RawMessage            `json:"nodes"`
		Value  int                        `json:"value"`
		Max    int                        `json:"max"`
		Output map[string]json.RawMessage `json:"output"`
	}
	_ = json.Unmarshal(e.data, &d)
	a.traceEvent(ctx, e.typ, d.Node)
	switch e.typ {
	case "execution_cached":
		var ids []string
		_ = json.Unmarshal(d.Nodes, &ids)
		a.progress.markDone(ids...)
	case "executing":
		if d.Node == nil {
			return a.finish(ctx)
		}
		a.progress.enter(*d.Node)
	case "progress":
		if d.Node != nil {
			a.progress.enter(*d.Node)
		}
		a.progress.step, a.progress.steps = d.Value, d.Max
	case "progress_state":
		var nodes map[string]struct {
			State string `json:"state"`
		}
		_ = json.Unmarshal(d.Nodes, &nodes)
		for id, n := range nodes {
			if n.State == "finished" {
				a.progress.markDone(id)
			}
		}
	case "executed":
		if d.Node != nil {
			a.progress.markDone(*d.Node)
			if err := a.commit(ctx, outputItems(*d.Node, d.Output)); err != nil {
				return true, err
			}
		}
	case "execution_success":
		a.successSeen = true
		return a.finish(ctx)
	case "execution_error":
		var ee executionError
		_ = json.Unmarshal(e.data, &ee)
		return true, ee.nodeError()
	case "execution_interrupted":
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		return true, &jobs.NodeError{Code: "node_execution_error", Message: "the worker interrupted the prompt"}
	default:
		return false, nil
	}
	a.reportProgress(ctx, false)
	return false, nil
}

func (a *attempt) reportProgress(ctx context.Context, final bool) {
	if a.run.Progress == nil {
		return
	}
	if p, changed := a.progress.snapshot(a.graph, final); changed {
		a.run.Progress(ctx, p)
	}
}

// finish confirms the end of the prompt with /history (which ComfyUI may
// write after execution_success), commits the outputs the events did not
// bring, and reports the outcome.
func (a *attempt) finish(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(historyWait)
	for {
		h, err := a.w.history(ctx, a.promptID)
		if err == nil && h != nil && (h.Status.Completed || h.Status.StatusStr != "") {
			return true, a.finishFrom(ctx, h)
		}
		if ctx.Err() != nil {
			return true, ctx.Err()
		}
		if time.Now().After(deadline) {
			break
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return true, ctx.Err()
		}
	}
	if a.successSeen {
		a.log.Warn("prompt succeeded but its history never appeared; keeping the outputs the events brought")
		a.reportProgress(ctx, true)
		return true, nil
	}
	return true, &jobs.WorkerLostError{Err: fmt.Errorf("prompt %s ended without a history entry", a.promptID)}
}

// finishFrom ends the attempt from its history entry.
func (a *attempt) finishFrom(ctx context.Context, h *historyEntry) error {
	a.historySeen = true
	for _, id := range sortedKeys(h.Outputs) {
		if err := a.commit(ctx, outputItems(id, h.Outputs[id])); err != nil {
			return err
		}
	}
	if h.Status.StatusStr == "error" {
		return historyFailure(h)
	}
	a.reportProgress(ctx, true)
	return nil
}

// reconcile asks the worker where the prompt is after a reconnect or a
// quiet spell: queued or running → keep waiting; in history → finish from
// it; in neither (re-checked for historyWait) → lost, and the worker is
// broken when it never named the prompt (see unmatched). A worker that
// does not answer is left to the health checks.
func (a *attempt) reconcile(ctx context.Context) (bool, error) {
	deadline := time.Now().Add(historyWait)
	for {
		st, err := a.w.queuePosition(ctx, a.promptID)
		if err != nil {
			return false, nil
		}
		if st != notQueued {
			a.seen = true
			return false, nil
		}
		h, err := a.w.history(ctx, a.promptID)
		if err != nil {
			return false, nil
		}
		if h != nil {
			a.seen = true
			return true, a.finishFrom(ctx, h)
		}
		if time.Now().After(deadline) {
			if err := a.unmatched(); err != nil {
				return true, &jobs.WorkerLostError{Err: err}
			}
			return true, &jobs.WorkerLostError{Err: fmt.Errorf("prompt %s is in neither the queue nor the history of the worker", a.promptID)}
		}
		if !sleepCtx(ctx, 200*time.Millisecond) {
			return false, nil
		}
	}
}

// commit fetches and commits the outputs not committed yet.
func (a *attempt) commit(ctx context.Context, items []outputItem) error {
	for _, it := range items {
		key := it.dedupeKey()
		if a.committed[key] {
			continue
		}
		a.committed[key] = true
		f := jobs.OutputFile{NodeID: it.NodeID}
		var openErr error
		if it.File != nil {
			ref := *it.File
			f.Name, f.Subfolder, f.Folder = ref.Filename, ref.Subfolder, ref.Type
			f.Type, f.ContentType = kindOf(it.Key, ref.Filename), contentTypeOf(ref.Filename)
			f.Open = func(ctx context.Context) (io.ReadCloser, error) {
				rc, err := a.w.view(ctx, ref)
				openErr = err
				return rc, err
			}
		} else {
			text := it.Text
			f.Name = fmt.Sprintf("%s_%s_%d.txt", it.NodeID, it.Key, it.Index)
			f.Subfolder = a.run.Job.ID
			f.Type, f.ContentType = "text", "text/plain; charset=utf-8"
			f.Open = func(context.Context) (io.ReadCloser, error) { return textReader(text), nil }
		}
		if err := a.run.Output(ctx, f); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if isTransport(openErr) {
				return &jobs.WorkerLostError{Err: openErr}
			}
			return fmt.Errorf("committing output %s of node %s: %w", f.Name, f.NodeID, err)
		}
	}
	return nil
}

// cancelRun stops the prompt on the worker after ctx ended and waits,
// bounded by cancelWait, for the worker to confirm; it returns ctx.Err().
func (a *attempt) cancelRun(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelWait)
	defer cancel()
	a.stopOnWorker(cctx)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-cctx.Done():
			a.log.Warn("the worker did not confirm the cancellation in time")
			return ctx.Err()
		case <-a.p.ctx.Done():
			return ctx.Err()
		case <-a.signal:
			for _, e := range a.drain() {
				switch {
				case e.kind == evLost:
					return ctx.Err()
				case e.kind == evMessage && isTerminal(e):
					return ctx.Err()
				}
			}
		case <-tick.C:
			// By id or attempt marker: a cancel may come before the answer
			// that names the prompt.
			if l, err := a.locate(cctx); err == nil && l.state == notQueued {
				return ctx.Err()
			}
		}
	}
}

func isTerminal(e event) bool {
	switch e.typ {
	case "execution_interrupted", "execution_error", "execution_success":
		return true
	case "executing":
		var d struct {
			Node *string `json:"node"`
		}
		return json.Unmarshal(e.data, &d) == nil && d.Node == nil
	}
	return false
}

// stopOnWorker takes the prompt (found by id or attempt marker) out of the
// worker's queue while it is pending there, and interrupts it (targeted by
// prompt_id; ComfyUI before 260a5ca5 interrupts whatever runs, which is
// checked to be this prompt just before) while it runs. Errors are
// ignored: a worker that does not answer loses the prompt anyway.
func (a *attempt) stopOnWorker(ctx context.Context) {
	l, err := a.locate(ctx)
	if err != nil {
		return
	}
	if l.state == pendingInQueue {
		_, _ = a.w.postJSON(ctx, "/queue", map[string]any{"delete": []string{l.id}})
		if l, err = a.w.find(ctx, l.id, ""); err != nil {
			return
		}
	}
	if l.state == runningInQueue {
		_, err := a.w.postJSON(ctx, "/interrupt", map[string]any{"prompt_id": l.id})
		if err != nil && !errors.Is(err, context.Canceled) {
			a.log.Debug("interrupting a prompt", zap.Error(err))
		}
	}
}

// traceEvent adds a worker message to the attempt's comfyui.run span: the
// start, each node's start and end (with its id and class), and the end.
// Progress steps are left out (one per sampler step).
func (a *attempt) traceEvent(ctx context.Context, typ string, node *string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	switch typ {
	case "execution_start", "execution_cached", "execution_success", "execution_error", "execution_interrupted":
		span.AddEvent(typ)
	case "executing", "executed":
		if node == nil {
			return
		}
		attrs := []attribute.KeyValue{tracing.AttrNodeID.String(*node)}
		if n, ok := a.graph[*node]; ok {
			attrs = append(attrs, tracing.AttrNodeClass.String(n.ClassType))
		}
		span.AddEvent("node."+typ, trace.WithAttributes(attrs...))
	}
}
