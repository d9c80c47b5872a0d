package comfyui

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// Execute runs one attempt of a job on a worker of the pool. See the
// package doc for the protocol; it returns nil on success, ctx.Err() when
// ctx ends (after stopping the prompt on the worker), a *jobs.NodeError when
// the worker refused the graph (code invalid_workflow: the first node
// error's message and details) or a node failed (node_execution_error), and
// a *jobs.WorkerLostError when the worker stopped answering or lost the
// prompt, so that the dispatcher hands the job to another worker.
func (p *Pool) Execute(ctx context.Context, run *jobs.Run) error {
	p.Start()
	g := cloneGraph(run.Graph)
	models := modelsOf(g, p.classSpec)
	w, warm, err := p.acquire(ctx, classesOf(g), models)
	if err != nil {
		return err
	}
	defer w.release()
	a := newAttempt(p, w, run, g)
	start := time.Now()
	err = a.execute(ctx)
	if err == nil && len(models) > 0 {
		p.times.observe(warm, time.Since(start))
	}
	return err
}

// attemptID is the attempt's prompt_id: a UUID derived from the job id and
// the attempt number, so that it is stable for the attempt and distinct
// between attempts.
func attemptID(job storage.Job) string {
	return uuid.NewSHA1(uuid.NameSpaceURL, []byte("comfygate:"+job.ID+":"+strconv.Itoa(job.Attempt))).String()
}

func (a *attempt) execute(ctx context.Context) error {
	// Whatever happens below (a failed upload, a refused graph, a node
	// error, a cancel, a lost worker), the inputs staged so far go.
	defer a.removeStagedInputs()
	cat, _ := a.w.catalogIfHealthy()
	if err := a.stage(ctx, cat); err != nil {
		return err
	}
	if err := a.prefixOutputs(cat); err != nil {
		return err
	}
	a.progress.plan(a.graph, cat)
	if a.logs != nil {
		a.w.wantLogs(ctx)
	}
	a.w.register(a)
	defer a.w.unregister(a)
	sctx, send := tracing.Start(ctx, "comfyui.send", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrWorker.String(a.w.base.Host)))
	err := a.submit(sctx)
	tracing.End(send, &err)
	if err == nil {
		// The prompt is queued on the worker: comfyui.run follows it
		// there, a span event per node, output ingest as children.
		rctx, run := tracing.Start(ctx, "comfyui.run", trace.WithAttributes(tracing.AttrWorker.String(a.w.base.Host)))
		run.AddEvent("queued")
		err = a.follow(rctx)
		var lost *jobs.WorkerLostError
		if a.logs != nil && !errors.As(err, &lost) {
			a.awaitTimingLine()
		}
		tracing.End(run, &err)
	}
	a.p.cleanupLater(a.w, a.promptID, a.historySeen)
	return err
}

// stage uploads every asset the graph references into the job's subfolder
// on the worker and rewrites the references to the staged names. An asset
// referenced twice is uploaded once.
func (a *attempt) stage(ctx context.Context, cat workflow.Catalog) error {
	refs, err := workflow.AssetRefs(a.graph, cat)
	if err != nil {
		return &jobs.NodeError{Code: "missing_asset", Message: "the workflow holds malformed asset references"}
	}
	subfolder := stagingSubfolder(a.run.Job.ID)
	staged := map[string]string{} // asset id → staged value
	usedNames := map[string]string{}
	for _, ref := range refs {
		if !ref.IsObject() && !ref.Upload {
			continue // a plain combo value such as "bilinear"
		}
		asset, rc, err := a.run.OpenAsset(ctx, ref.AssetID, ref.FileName)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !ref.IsObject() && errors.Is(err, storage.ErrNotFound) {
				continue // a file the worker's own input folder may hold
			}
			if errors.Is(err, storage.ErrNotFound) {
				return &jobs.NodeError{Code: "missing_asset", NodeID: ref.Node, ClassType: a.graph[ref.Node].ClassType,
					Message: fmt.Sprintf("input %q refers to an asset that does not exist", ref.Input)}
			}
			return fmt.Errorf("opening asset for %s.%s: %w", ref.Node, ref.Input, err)
		}
		value, ok := staged[asset.ID]
		if !ok {
			name := uploadName(asset, usedNames)
			up, err := a.w.upload(ctx, subfolder, name, rc)
			rc.Close()
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if isTransport(err) {
					return &jobs.WorkerLostError{Err: err}
				}
				return fmt.Errorf("staging an input: %w", err)
			}
			value = up.Name
			if up.Subfolder != "" {
				value = up.Subfolder + "/" + up.Name
			}
			staged[asset.ID] = value
		} else {
			rc.Close()
		}
		if err := a.graph.SetInput(ref.Node, ref.Input, value); err != nil {
			return err
		}
	}
	return nil
}

// uploadName is the asset's base name, prefixed with its id when another
// asset of the job already took that name.
func uploadName(asset storage.Asset, used map[string]string) string {
	name := path.Base(asset.FilePath)
	if name == "." || name == "/" || name == "" {
		name = asset.ID
	}
	if owner, taken := used[name]; taken && owner != asset.ID {
		name = asset.ID[:min(8, len(asset.ID))] + "_" + name
	}
	used[name] = asset.ID
	return name
}

// prefixOutputs gives every output node with a filename_prefix input a
// per-job prefix, <job id>/<prefix>, so that outputs never collide between
// jobs and never come from ComfyUI's cache.
func (a *attempt) prefixOutputs(cat workflow.Catalog) error {
	for _, id := range sortedKeys(a.graph) {
		n := a.graph[id]
		class, ok := cat[n.ClassType]
		if !ok || !class.OutputNode {
			continue
		}
		if _, _, has := class.Input("filename_prefix"); !has {
			continue
		}
		prefix := "ComfyUI"
		if raw, set := n.Inputs["filename_prefix"]; set {
			if _, isLink := workflow.ParseLink(raw); isLink {
				continue
			}
			var s string
			if json.Unmarshal(raw, &s) == nil && s != "" {
				prefix = s
			}
		}
		prefix = strings.TrimLeft(prefix, "/")
		if err := a.graph.SetInput(id, "filename_prefix", a.run.Job.ID+"/"+prefix); err != nil {
			return err
		}
	}
	return nil
}

// submit queues the graph and claims the prompt id the worker answers. A
// refused graph (400, or a 200 whose node_errors is not empty, in which
// case ComfyUI queued the outputs that did validate and we take the prompt
// back) is a *jobs.NodeError. An answer that was lost, or names no prompt,
// is made up for by finding the prompt in /queue by its attempt marker.
func (a *attempt) submit(ctx context.Context) error {
	extra := map[string]string{attemptMarker: a.sentID}
	for k, v := range a.run.ExtraData {
		extra[k] = v // forwarded, never logged
	}
	body := map[string]any{"prompt": a.graph, "prompt_id": a.sentID, "client_id": a.w.clientID, "extra_data": extra}
	answered := a.w.awaitingAnswer()
	defer answered()
	data, err := a.w.postJSON(ctx, "/prompt", body)
	var se *statusError
	switch {
	case ctx.Err() != nil:
		return a.cancelRun(ctx)
	case errors.As(err, &se) && se.Status == 400:
		var ans promptAnswer
		if json.Unmarshal(se.Body, &ans) != nil {
			return fmt.Errorf("comfyui /prompt: HTTP 400 without a JSON body")
		}
		return validationError(ans)
	case err != nil && (isTransport(err) || errors.As(err, &se) && unavailable(se.Status)):
		// The prompt may have been queued before the answer was lost (or
		// before a proxy in front of the worker gave up). A worker that
		// refuses it while it shuts down has not run it: the job is handed
		// on, not failed.
		if l, lerr := a.locate(ctx); lerr == nil && l.state != notQueued {
			a.log.Warn("POST /prompt's answer was lost; following the prompt found in the queue", zap.Error(err))
			a.claim(l.id)
			return nil
		}
		return &jobs.WorkerLostError{Err: err}
	case err != nil:
		return err
	}
	var ans promptAnswer
	if err := json.Unmarshal(data, &ans); err != nil {
		return fmt.Errorf("comfyui /prompt: %w", err)
	}
	if ans.PromptID == "" {
		l, lerr := a.locate(ctx)
		if lerr != nil || l.state == notQueued {
			why := "POST /prompt answered 200 without a prompt_id"
			a.w.markBroken(why)
			return &jobs.WorkerLostError{Err: fmt.Errorf("worker %s: %s", a.w.base.Redacted(), why)}
		}
		ans.PromptID = l.id
	}
	a.claim(ans.PromptID)
	if len(ans.NodeErrors) > 0 {
		a.stopOnWorker(ctx)
		return validationError(ans)
	}
	return nil
}

// cleanupLater deletes the prompt's history entry in the background once
// it exists (ComfyUI writes it after the terminal event). Staged inputs are
// not its business: ComfyUI has no route that deletes them, so they are
// removed from disk by removeStagedInputs when the worker has an InputDir,
// and otherwise stay in their per-job subfolder.
func (p *Pool) cleanupLater(w *worker, promptID string, haveHistory bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		ctx := p.ctx
		if !haveHistory {
			for deadline := time.Now().Add(historyWait); time.Now().Before(deadline); {
				if h, err := w.history(ctx, promptID); err == nil && h != nil {
					break
				}
				if !sleepCtx(ctx, 100*time.Millisecond) {
					return
				}
			}
		}
		if _, err := w.postJSON(ctx, "/history", map[string]any{"delete": []string{promptID}}); err != nil && ctx.Err() == nil {
			w.log.Debug("deleting a prompt's history", zap.String("prompt_id", promptID), zap.Error(err))
		}
	}()
}

// unavailable reports whether an HTTP status says the worker (or a proxy
// in front of it) did not take the request now, rather than refused it.
func unavailable(status int) bool {
	return status == http.StatusBadGateway || status == http.StatusServiceUnavailable || status == http.StatusGatewayTimeout
}

func cloneGraph(g workflow.Graph) workflow.Graph {
	c := make(workflow.Graph, len(g))
	for id, n := range g {
		inputs := make(map[string]json.RawMessage, len(n.Inputs))
		for k, v := range n.Inputs {
			inputs[k] = v
		}
		n.Inputs = inputs
		c[id] = n
	}
	return c
}

func classesOf(g workflow.Graph) []string {
	set := map[string]bool{}
	for _, n := range g {
		set[n.ClassType] = true
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// textReader serves a text output's bytes.
func textReader(s string) io.ReadCloser { return io.NopCloser(strings.NewReader(s)) }
