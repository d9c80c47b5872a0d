package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/bus"
)

// DispatcherConfig bounds a dispatcher.
type DispatcherConfig struct {
	// Pool is the pool whose queue this dispatcher drains.
	Pool string
	// Concurrency is how many jobs run at once in this process.
	Concurrency int
	// Lease is how long a claim lasts without a heartbeat; a process that
	// dies loses its jobs to another within this time.
	Lease time.Duration
	// MaxAttempts is how many times a job is tried before it fails with worker_lost.
	MaxAttempts int
	// AccountMaxRunning bounds how many jobs of one account run at once in
	// the pool, across every process; 0 means unbounded.
	AccountMaxRunning int
	// RunningBound expires a job that has been running longer than this.
	RunningBound time.Duration
	// PollInterval is the fallback poll of the queue when no wake-up arrives.
	PollInterval time.Duration
	// PurgeAfter is how long after its ExpiresAt a finished job's record
	// (with its run log) is kept before the reaper deletes it; 0 keeps
	// records for good.
	PurgeAfter time.Duration
	// Sweep bounds the retention sweeps (expiry and purge): rows per
	// statement and the pause between statements.
	Sweep SweepConfig
}

// Throttles: progress snapshots within one node, and live previews (the
// contract's ~2 per second).
const (
	progressInterval = 250 * time.Millisecond
	previewInterval  = 500 * time.Millisecond
)

var (
	errCanceled  = errors.New("jobs: canceled")
	errLeaseLost = errors.New("jobs: lease lost")
)

// Dispatcher claims a pool's queued jobs and runs them on its executor.
type Dispatcher struct {
	Store     Store
	Blobs     blob.Store
	Bus       bus.Bus
	Exec      Executor
	ExtraData *ExtraDataCache
	Config    DispatcherConfig
	// Owner names this process in leases.
	Owner  string
	Logger *zap.Logger
	// RunContext, when set, is the context attempts run under, separate from
	// the one that stops claiming: a config reload stops claiming but lets
	// running attempts finish; only a process exit cancels them. Nil means
	// Run's context.
	RunContext context.Context
	// Slots, when set, bounds how many attempts run at once by its current
	// answer, for a pool whose workers come and go; Config.Concurrency is
	// then the most that ever run. Nil: Config.Concurrency.
	Slots func() int

	wake   chan struct{}
	active atomic.Int64
}

// Run claims and runs the queue's jobs until ctx ends, then returns once its
// running attempts have returned. An attempt canceled by shutdown is left
// to its lease: another process (or this one after a restart) reclaims it.
func (d *Dispatcher) Run(ctx context.Context) {
	d.wake = make(chan struct{}, 1)
	queued := d.Bus.SubscribeQueued()
	defer queued.Cancel()
	var wg sync.WaitGroup
	for range d.Config.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.work(ctx)
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		d.reap(ctx)
	}()
	go func() {
		defer wg.Done()
		d.retire(ctx)
	}()
	poll := time.NewTicker(d.Config.PollInterval)
	defer poll.Stop()
	d.kick()
	for {
		select {
		case <-ctx.Done():
			wg.Wait()
			return
		case e := <-queued.C:
			if e.Pool == d.Config.Pool {
				d.kick()
			}
		case <-poll.C:
			d.kick()
		}
	}
}

// kick wakes one idle worker; a worker that finds a job kicks the next.
func (d *Dispatcher) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) work(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		}
		for ctx.Err() == nil {
			if d.Slots != nil && d.active.Add(1) > int64(d.Slots()) {
				d.active.Add(-1)
				break // the pool has no free slot; a finished attempt kicks
			}
			claimStart := time.Now()
			job, err := d.claim(ctx)
			if err != nil {
				break
			}
			d.kick() // there may be more; let another worker look
			if job.Attempt == 1 && job.StartedAt != nil {
				metrics.JobQueueWait.WithLabelValues(job.Pool).Observe(job.StartedAt.Sub(job.CreatedAt).Seconds())
			}
			runCtx := d.RunContext
			if runCtx == nil {
				runCtx = ctx
			}
			d.runJob(runCtx, job, claimStart)
			if d.Slots != nil {
				d.active.Add(-1)
				d.kick()
			}
		}
	}
}

// claim claims the pool's next job; an error (storage.ErrNotFound when the
// queue is empty) releases the slot work took.
func (d *Dispatcher) claim(ctx context.Context) (storage.Job, error) {
	job, err := d.Store.ClaimJob(ctx, d.Config.Pool, d.Owner, d.Config.Lease, d.Config.AccountMaxRunning,
		blob.RemoveFunc(ctx, d.Blobs))
	if err != nil {
		if d.Slots != nil {
			d.active.Add(-1)
		}
		if !errors.Is(err, storage.ErrNotFound) && ctx.Err() == nil {
			d.Logger.Error("claiming a job", zap.String("pool", d.Config.Pool), zap.Error(err))
		}
	}
	return job, err
}

// runJob runs one attempt and records how it ended. Its job.dispatch
// span (from claimStart, when the claim began) continues the submit's
// trace (job.TraceParent) as a child of the job.submit span, whichever
// process submitted the job; job.claim and job.execute are its children.
func (d *Dispatcher) runJob(parent context.Context, job storage.Job, claimStart time.Time) {
	log := d.Logger.With(zap.String("job_id", job.ID), zap.Int("attempt", job.Attempt))
	tctx, span := tracing.Start(tracing.WithTraceParent(parent, job.TraceParent), "job.dispatch",
		trace.WithTimestamp(claimStart), trace.WithAttributes(tracing.AttrJobID.String(job.ID),
			tracing.AttrAttempt.Int(job.Attempt), tracing.AttrPool.String(job.Pool)))
	defer span.End()
	if span.IsRecording() {
		_, claimed := tracing.Start(tctx, "job.claim", trace.WithTimestamp(claimStart))
		claimed.End()
	}
	publishStatus(parent, d.Bus, job)
	runCtx, cancel := context.WithCancelCause(tctx)
	defer cancel(nil)

	watch := d.Bus.Subscribe(job.ID)
	defer watch.Cancel()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		d.keepLease(runCtx, job, watch, cancel, log)
	}()

	run := d.newRun(runCtx, job, nil, cancel)
	graph, err := workflow.DecodeGraph(job.Workflow)
	if err == nil {
		run.Graph = graph
		ectx, exec := tracing.Start(runCtx, "job.execute")
		err = d.Exec.Execute(ectx, run)
		tracing.End(exec, &err)
	}
	defer func() {
		if span.IsRecording() {
			if st := context.Cause(runCtx); errors.Is(st, errLeaseLost) {
				span.SetAttributes(tracing.AttrStatus.String("lease_lost"))
			}
		}
	}()
	cancel(nil)
	<-hbDone
	cause := context.Cause(runCtx)
	var status string
	var jobErr json.RawMessage
	var ne *NodeError
	var lost *WorkerLostError
	switch {
	case errors.Is(cause, errLeaseLost):
		log.Warn("attempt lost its lease; abandoning it")
		return
	case parent.Err() != nil:
		return // shutting down: the lease hands the job on
	case errors.As(err, &lost) && !errors.Is(cause, errCanceled):
		log.Warn("worker lost; handing the job back", zap.Error(err))
		run.Log.Printf("the worker running this job stopped answering")
		d.saveLog(parent, job, run.Log, log)
		d.release(parent, job)
		return
	case errors.Is(cause, errCanceled):
		status = storage.JobCanceled
	case err == nil:
		status = storage.JobSucceeded
	case errors.As(err, &ne):
		status, jobErr = storage.JobFailed, ne.JSON()
	default:
		log.Error("executing a job", zap.Error(err))
		status, jobErr = storage.JobFailed, ErrorJSON("execution_failed", "the job could not be executed")
		run.Log.Printf("the job could not be executed")
	}
	span.SetAttributes(tracing.AttrStatus.String(status))
	d.saveLog(parent, job, run.Log, log)
	done, err := d.Store.FinishJob(context.WithoutCancel(parent), job.ID, job.Attempt, status, jobErr)
	if errors.Is(err, storage.ErrLeaseLost) {
		log.Warn("attempt finished after losing its lease")
		return
	}
	if err != nil {
		log.Error("recording the end of a job", zap.String("status", status), zap.Error(err))
		return
	}
	countEnd(done)
	d.ExtraData.Delete(job.ID)
	publishStatus(parent, d.Bus, done)
}

// saveLog stores the attempt's run log (jobs of serverless deployments
// only) before the attempt's end is recorded, so a terminal job that has
// a log never shows without it. A later attempt replaces it.
func (d *Dispatcher) saveLog(ctx context.Context, job storage.Job, rl *RunLog, log *zap.Logger) {
	if rl == nil {
		return
	}
	err := d.Store.SetJobLog(context.WithoutCancel(ctx), job.ID, job.Attempt, rl.JobLog(time.Now()))
	if err != nil && !errors.Is(err, storage.ErrLeaseLost) {
		log.Error("storing a job's run log", zap.Error(err))
	}
}

// release hands a job whose worker was lost back to the queue (or fails it
// once it has had its attempts).
func (d *Dispatcher) release(ctx context.Context, job storage.Job) {
	j, err := d.Store.ReleaseJob(context.WithoutCancel(ctx), job.ID, job.Attempt, d.Config.MaxAttempts, workerLostJSON)
	if err != nil {
		if !errors.Is(err, storage.ErrLeaseLost) {
			d.Logger.Error("handing a job back", zap.String("job_id", job.ID), zap.Error(err))
		}
		return
	}
	countRequeued(j)
	publishStatus(ctx, d.Bus, j)
	if j.Status == storage.JobQueued {
		_ = d.Bus.Publish(ctx, bus.Event{JobID: j.ID, Kind: "queued", Pool: j.Pool})
	} else {
		d.ExtraData.Delete(j.ID)
	}
}

// workerLostJSON is the job.error of a job that ran out of attempts.
var workerLostJSON = ErrorJSON("worker_lost", "the worker running this job stopped answering and the job ran out of attempts")

// keepLease renews the attempt's lease until ctx ends, and cancels the run
// when the job is canceled or the lease is lost.
func (d *Dispatcher) keepLease(ctx context.Context, job storage.Job, watch *bus.Subscription, cancel context.CancelCauseFunc, log *zap.Logger) {
	t := time.NewTicker(d.Config.Lease / 3)
	defer t.Stop()
	renew := func() {
		status, err := d.Store.RenewLease(ctx, job.ID, job.Attempt, d.Config.Lease)
		switch {
		case errors.Is(err, storage.ErrLeaseLost):
			cancel(errLeaseLost)
		case err != nil:
			if ctx.Err() == nil {
				log.Warn("renewing a lease", zap.Error(err))
			}
		case status == storage.JobCanceling:
			cancel(errCanceled)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			renew()
		case e := <-watch.C:
			if e.Kind == "status" {
				renew() // a cancel request is seen at once, not at the next tick
			}
		}
	}
}

// newRun binds an attempt's callbacks.
func (d *Dispatcher) newRun(ctx context.Context, job storage.Job, graph workflow.Graph, cancel context.CancelCauseFunc) *Run {
	var lastProgress, lastPreview time.Time
	lastDone := -1
	// started is Progress.NodesStarted; a node counts once (ComfyUI may
	// re-enter one), and only a node of the submitted graph (not one that
	// ComfyUI's node expansion created as it ran), which bounds the list
	// by the workflow's size.
	var started []string
	startedSet := map[string]bool{}
	var runLog *RunLog
	if job.DeploymentID != "" {
		runLog = NewRunLog(storage.MaxJobLogBytes)
	}
	var run *Run
	run = &Run{
		Job:       job,
		Graph:     graph,
		Log:       runLog,
		ExtraData: d.ExtraData.Get(job.ID),
		OpenAsset: func(ctx context.Context, assetID, fileName string) (storage.Asset, io.ReadCloser, error) {
			a, err := lookupRef(ctx, d.Store, job.AccountID, assetID, fileName)
			if err != nil {
				return a, nil, err
			}
			f, _, err := d.Blobs.Open(ctx, a.Object(), 0)
			return a, f, err
		},
		Progress: func(ctx context.Context, p Progress) {
			newNode := false
			if n := p.CurrentNode; n != nil && !startedSet[*n] && run.Graph[*n].ClassType != "" {
				startedSet[*n], newNode = true, true
				started = append(started, *n)
			}
			p.NodesStarted = started
			now := time.Now()
			// A node's first snapshot always passes, so that its start is
			// told when it happens (a ComfyUI client shows the running node
			// from its executing message): a ComfyUI worker reports a
			// node's end and the next one's start with the same count, and
			// the next node may run long without reporting again. That is
			// at most one write per node, as the built-in executor's
			// counts already make. The final snapshot always passes too.
			if !newNode && p.NodesDone == lastDone && p.Value < 1 && now.Sub(lastProgress) < progressInterval {
				return // within a node
			}
			lastProgress, lastDone = now, p.NodesDone
			data, _ := json.Marshal(p)
			if err := d.Store.SetProgress(ctx, job.ID, job.Attempt, data); errors.Is(err, storage.ErrLeaseLost) {
				cancel(errLeaseLost)
				return
			}
			_ = d.Bus.Publish(ctx, bus.Event{JobID: job.ID, Kind: "progress", Data: data})
		},
		Preview: func(nodeID, contentType string, data []byte) {
			now := time.Now()
			if now.Sub(lastPreview) < previewInterval {
				return
			}
			lastPreview = now
			payload, _ := json.Marshal(map[string]any{"node_id": nodeID, "content_type": contentType, "data_base64": data})
			_ = d.Bus.Publish(ctx, bus.Event{JobID: job.ID, Kind: "preview", Data: payload})
		},
		Output: func(ctx context.Context, f OutputFile) error {
			out, err := d.commitOutput(ctx, job, f)
			if errors.Is(err, storage.ErrLeaseLost) {
				cancel(errLeaseLost)
			}
			if err != nil {
				return err
			}
			data, _ := json.Marshal(out)
			_ = d.Bus.Publish(ctx, bus.Event{JobID: job.ID, Kind: "output", Data: data})
			return nil
		},
	}
	return run
}

// commitOutput stores an output's bytes and records it as the job's asset,
// in a job.output span.
func (d *Dispatcher) commitOutput(ctx context.Context, job storage.Job, f OutputFile) (out storage.Output, err error) {
	ctx, span := tracing.Start(ctx, "job.output", trace.WithAttributes(
		tracing.AttrNodeID.String(f.NodeID), attribute.String("comfygate.output.type", f.Type)))
	defer func() {
		if err == nil && span.IsRecording() {
			span.SetAttributes(tracing.AttrAssetID.String(out.Asset.ID), attribute.Int64("comfygate.output.size", out.Asset.SizeBytes))
		}
		tracing.End(span, &err)
	}()
	rc, err := f.Open(ctx)
	if err != nil {
		return storage.Output{}, fmt.Errorf("opening output %s: %w", f.Name, err)
	}
	defer rc.Close()
	up, err := d.Blobs.NewUpload(ctx, "")
	if err != nil {
		return storage.Output{}, err
	}
	defer up.Abort()
	if _, err := up.ReadFrom(rc); err != nil {
		return storage.Output{}, fmt.Errorf("storing output %s: %w", f.Name, err)
	}
	hash, size, err := up.Finish()
	if err != nil {
		return storage.Output{}, err
	}
	expires := job.ExpiresAt
	return d.Store.AddOutput(ctx, job.ID, job.Attempt, storage.NewOutput{
		NodeID: f.NodeID,
		Name:   f.Name,
		Type:   f.Type,
		Folder: f.Folder,
		Asset: storage.NewAsset{
			ID:          storage.NewID(),
			Hash:        hash,
			SizeBytes:   size,
			ContentType: f.ContentType,
			FilePath:    path.Join(f.Subfolder, f.Name),
			// Outputs live as long as their job; the sweeper removes them after.
			ExpiresAt: &expires,
		},
	}, up)
}

// reap hands on jobs whose attempts died.
func (d *Dispatcher) reap(ctx context.Context) {
	t := time.NewTicker(d.Config.Lease / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := d.Store.ReclaimExpired(ctx, time.Now(), d.Config.MaxAttempts, workerLostJSON)
		if err != nil && ctx.Err() == nil {
			d.Logger.Error("reclaiming expired leases", zap.Error(err))
		}
		for _, j := range changed {
			countRequeued(j)
			publishStatus(ctx, d.Bus, j)
			if j.Status == storage.JobQueued {
				_ = d.Bus.Publish(ctx, bus.Event{JobID: j.ID, Kind: "queued", Pool: j.Pool})
			}
		}
	}
}

// retire expires overdue jobs and deletes records past PurgeAfter, each
// sweep drained in bounded batches with a pause between them (Sweep), on
// its own loop so that a long sweep never delays reap.
func (d *Dispatcher) retire(ctx context.Context) {
	t := time.NewTicker(d.Config.Lease / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		_, err := d.Config.Sweep.Drain(ctx, func(ctx context.Context, limit int) (int, error) {
			expired, err := d.Store.ExpireJobs(ctx, now, now.Add(-d.Config.RunningBound), limit)
			for _, j := range expired {
				countEnd(j)
				publishStatus(ctx, d.Bus, j)
			}
			return len(expired), err
		})
		if err != nil && ctx.Err() == nil {
			d.Logger.Error("expiring jobs", zap.Error(err))
		}
		if d.Config.PurgeAfter > 0 {
			before := now.Add(-d.Config.PurgeAfter)
			if _, err := d.Config.Sweep.Drain(ctx, func(ctx context.Context, limit int) (int, error) {
				return d.Store.DeleteExpiredJobs(ctx, before, limit)
			}); err != nil && ctx.Err() == nil {
				d.Logger.Error("deleting jobs past retention", zap.Error(err))
			}
		}
	}
}
