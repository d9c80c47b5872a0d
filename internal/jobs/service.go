// Package jobs is the domain service behind /api/v2/jobs: synchronous
// validation and durable submission, lookup, listing and cancellation, and
// the dispatcher that claims queued jobs with leases and runs them on an
// executor (the built-in one, or a ComfyUI pool). It knows nothing of Caddy.
package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/google/uuid"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/idem"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/bus"
)

// Store is what the jobs service needs from storage.
type Store interface {
	storage.AssetStore
	storage.JobStore
}

// Config holds the service's bounds.
type Config struct {
	// Pool is the pool new jobs are submitted to.
	Pool string
	// MaxQueued bounds the pool's queue; over it submit is 429 queue_full.
	MaxQueued int
	// AccountMaxQueued bounds one account's queue in the pool; over it that
	// account's submit is 429 queue_full. 0 = unbounded.
	AccountMaxQueued int
	// Price, when set, prices the pool's jobs: each reserves Price.Reserve
	// credits at submit (402 insufficient_credits when the account's
	// balance cannot cover it) and is settled at its end.
	Price *storage.JobPrice
	// Retention is how long a job is kept after submission.
	Retention time.Duration
	// Limits bound a submitted body and graph.
	Limits workflow.Limits
	// Deployment, when set, scopes the service to one serverless
	// deployment: new jobs carry it, and only its jobs are found and listed.
	Deployment string
}

// ErrJobIDTaken is SubmitWithID's answer for an id some job already has.
var ErrJobIDTaken = apierr.New(http.StatusConflict, "job_id_taken", "a job with this id already exists")

// QueueFullRetryAfter is the Retry-After of a queue_full refusal, in seconds.
const QueueFullRetryAfter = 2

// queueFullMessages are queue_full's messages by the bound that refused.
var queueFullMessages = map[string]string{
	storage.BoundAccountMaxQueued: "your account's queue on this pool is full",
	storage.BoundMaxQueued:        "the queue is full",
	storage.BoundFairShare:        "your account holds its fair share of this pool's full queue",
	storage.BoundOverflow:         "this pool's queue is full; only accounts with nothing queued are admitted",
	storage.BoundCeiling:          "this pool's queue is full",
}

// QueueFull is the 429 queue_full answer to a storage queue-bound
// refusal: details name the bound that refused ("bound") and the number
// of queued jobs it allows ("limit"; the account's, or the pool's for
// overflow and ceiling), so a client knows whether its own queue or the
// pool's is the matter.
func QueueFull(err error) *apierr.Error {
	bound, limit, _ := storage.QueueBound(err)
	msg, ok := queueFullMessages[bound]
	if !ok {
		msg = queueFullMessages[storage.BoundMaxQueued]
	}
	d := map[string]any{"bound": bound}
	if limit > 0 {
		d["limit"] = limit
	}
	return apierr.New(http.StatusTooManyRequests, "queue_full", msg+"; retry after the indicated delay").
		WithRetryAfter(QueueFullRetryAfter).WithDetails(d)
}

// Service is the jobs domain service.
type Service struct {
	Store Store
	Blobs blob.Store
	Bus   bus.Bus
	// Catalog returns the node catalog of the pool jobs go to.
	Catalog func(ctx context.Context) (workflow.Catalog, error)
	// Precheck, when set, judges a workflow that validated against what
	// the pool's executor can run (the built-in executor's memory bound);
	// its error is the submit's answer.
	Precheck func(ctx context.Context, g workflow.Graph) error
	// ExtraData keeps each job's extra_data in memory until its first
	// attempt starts; it is never written to storage.
	ExtraData *ExtraDataCache
	Config    Config
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// Submit validates body and records a queued job for account. Validation
// failures claim nothing; the idempotency key is taken only just before the
// job is written.
func (s *Service) Submit(ctx context.Context, account string, body []byte) (storage.Job, error) {
	return s.SubmitWithID(ctx, account, storage.NewID(), body)
}

// SubmitWithID is Submit with the job id chosen by the caller (a UUID; a
// used one is refused as storage refuses it, with ErrDuplicate).
func (s *Service) SubmitWithID(ctx context.Context, account, id string, body []byte) (job storage.Job, err error) {
	ctx, span := tracing.Start(ctx, "job.submit", trace.WithAttributes(
		tracing.AttrJobID.String(id), tracing.AttrPool.String(s.Config.Pool)))
	defer tracing.End(span, &err)
	sub, err := s.validate(ctx, account, body)
	if err != nil {
		return storage.Job{}, err
	}
	if err := idem.Reach(ctx); err != nil {
		return storage.Job{}, err
	}
	cctx, commit := tracing.Start(ctx, "job.commit")
	job, err = s.Store.CreateJob(cctx, storage.NewJob{
		ID:             id,
		AccountID:      account,
		Pool:           s.Config.Pool,
		DeploymentID:   s.Config.Deployment,
		Workflow:       sub.RawWorkflow,
		ExpiresAt:      s.now().Add(s.Config.Retention).UTC(),
		IdempotencyKey: idem.KeyOf(ctx),
		MaxQueued:      s.Config.MaxQueued,
		// The bound and the price are per pool: the same for every job of
		// a batch, so priced and bounded submissions still batch.
		AccountMaxQueued: s.Config.AccountMaxQueued,
		Price:            s.Config.Price,
		TraceParent:      tracing.TraceParent(ctx),
	})
	tracing.End(commit, &err)
	switch {
	case errors.Is(err, storage.ErrInsufficientCredits):
		return storage.Job{}, apierr.New(http.StatusPaymentRequired, "insufficient_credits",
			fmt.Sprintf("your credit balance cannot cover this job's maximum charge of %d credits", s.Config.Price.Reserve))
	case errors.Is(err, storage.ErrQueueFull):
		return storage.Job{}, QueueFull(err)
	case errors.Is(err, storage.ErrDuplicate) && idem.KeyOf(ctx) == "":
		return storage.Job{}, ErrJobIDTaken
	case errors.Is(err, storage.ErrDuplicate):
		return storage.Job{}, apierr.IdempotencyKeyReuse()
	case err != nil:
		return storage.Job{}, apierr.Upstream(err)
	}
	metrics.JobsSubmitted.WithLabelValues(job.Pool).Inc()
	if len(sub.ExtraData) > 0 && s.ExtraData != nil {
		s.ExtraData.Put(job.ID, sub.ExtraData)
	}
	// The job is durable; a lost wake-up only delays it until the next poll.
	enqueued := time.Now()
	_ = s.Bus.Publish(context.WithoutCancel(ctx), bus.Event{JobID: job.ID, Kind: "queued", Pool: job.Pool})
	tracing.Phase(span, "job.enqueue", enqueued)
	return job, nil
}

// validate parses body and checks its workflow against the pool's catalog
// and the caller's assets; a job.validate event on the submit's span.
func (s *Service) validate(ctx context.Context, account string, body []byte) (sub *workflow.Submission, err error) {
	start := time.Now()
	defer func() {
		if err != nil {
			tracing.Phase(trace.SpanFromContext(ctx), "job.validate", start, semconv.ErrorTypeKey.String(errorType(err)))
			return
		}
		tracing.Phase(trace.SpanFromContext(ctx), "job.validate", start)
	}()
	sub, err = workflow.ParseSubmit(body, s.Config.Limits)
	if err != nil {
		return nil, err
	}
	cat, err := s.Catalog(ctx)
	if err != nil {
		if _, typed := apierr.As(err); typed {
			return nil, err // e.g. 503 while no worker of the pool answers
		}
		return nil, apierr.Upstream(fmt.Errorf("loading the node catalog: %w", err))
	}
	resolved, err := s.resolveAssets(ctx, account, sub.Workflow, cat)
	if err != nil {
		return nil, err
	}
	if err := workflow.Validate(sub.Workflow, cat, workflow.WithResolvedInputs(resolved)); err != nil {
		return nil, err
	}
	if s.Precheck != nil {
		if err := s.Precheck(ctx, sub.Workflow); err != nil {
			return nil, err
		}
	}
	return sub, nil
}

// resolveAssets checks every asset reference against the caller's assets
// and returns the inputs that hold one.
func (s *Service) resolveAssets(ctx context.Context, account string, g workflow.Graph, cat workflow.Catalog) (map[workflow.InputKey]bool, error) {
	refs, err := workflow.AssetRefs(g, cat)
	if err != nil {
		return nil, err
	}
	resolved := map[workflow.InputKey]bool{}
	var missing []string
	nodeErrors := map[string][]map[string]string{}
	for _, ref := range refs {
		key := workflow.InputKey{Node: ref.Node, Input: ref.Input}
		listed := listedChoice(g, cat, ref)
		if listed && !ref.Upload {
			// The node's own option ("bilinear"): valid whether or not an
			// asset bears the name, so looking it up would change nothing
			// but cost a database round trip per value. Upload pickers
			// (LoadImage.image) are always looked up: there a listed name
			// may still mean the caller's asset.
			continue
		}
		_, err := lookupRef(ctx, s.Store, account, ref.AssetID, ref.FileName)
		switch {
		case err == nil:
			resolved[key] = true
			continue
		case !errors.Is(err, storage.ErrNotFound):
			return nil, apierr.Upstream(err)
		}
		if !ref.IsObject() && (!ref.Upload || listed) {
			continue // an ordinary combo value or a listed file, for Validate to judge
		}
		name := ref.AssetID
		if name == "" {
			name = ref.FileName
		}
		missing = append(missing, name)
		nodeErrors[ref.Node] = append(nodeErrors[ref.Node], map[string]string{
			"field": ref.Input, "reason": "missing_asset",
			"message": fmt.Sprintf("%q is not one of your assets", name),
		})
	}
	if len(missing) > 0 {
		return nil, apierr.New(http.StatusUnprocessableEntity, "missing_asset",
			"the workflow references assets that do not exist or are not yours").
			WithDetails(map[string]any{"missing": missing, "node_errors": nodeErrors})
	}
	return resolved, nil
}

// listedChoice reports whether ref is a plain string that is one of its
// combo input's listed choices, which Validate accepts as it stands.
func listedChoice(g workflow.Graph, cat workflow.Catalog, ref workflow.AssetRef) bool {
	if ref.IsObject() {
		return false
	}
	spec, _, ok := cat[g[ref.Node].ClassType].Input(ref.Input)
	return ok && spec.HasChoice(ref.FileName)
}

// lookupRef finds the caller's asset by id (a core/ASSET object) or by
// file path (a plain file name).
func lookupRef(ctx context.Context, st storage.AssetStore, account, assetID, fileName string) (storage.Asset, error) {
	if assetID != "" {
		if _, err := uuid.Parse(assetID); err != nil {
			return storage.Asset{}, storage.ErrNotFound
		}
		return st.GetAsset(ctx, account, assetID)
	}
	return st.FindAssetByPath(ctx, account, fileName)
}

// Get returns the account's job.
func (s *Service) Get(ctx context.Context, account, id string) (storage.Job, error) {
	if _, err := uuid.Parse(id); err != nil {
		return storage.Job{}, jobNotFound()
	}
	j, err := s.Store.GetJob(ctx, account, id)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && !s.inScope(j)) {
		return storage.Job{}, jobNotFound()
	}
	if err != nil {
		return storage.Job{}, apierr.Upstream(err)
	}
	return j, nil
}

// inScope reports whether j may be seen through this service: on a
// deployment only that deployment's jobs are (a job's deployment never
// changes); elsewhere all of the account's.
func (s *Service) inScope(j storage.Job) bool {
	return s.Config.Deployment == "" || j.DeploymentID == s.Config.Deployment
}

// QueuePosition returns the job's 1-based queue position, or nil when it
// is not queued. A position read with the job (CreateJob, GetJob) is used
// as it stands; only a job read without one costs a query.
func (s *Service) QueuePosition(ctx context.Context, j storage.Job) (*int, error) {
	if j.Status != storage.JobQueued {
		return nil, nil
	}
	if j.QueuePosition > 0 {
		pos := j.QueuePosition
		return &pos, nil
	}
	pos, err := s.Store.QueuePosition(ctx, j.ID)
	if err != nil {
		return nil, apierr.Upstream(err)
	}
	if pos == 0 {
		return nil, nil
	}
	return &pos, nil
}

// Cancel requests cancellation and returns the job as it now stands.
func (s *Service) Cancel(ctx context.Context, account, id string) (_ storage.Job, err error) {
	ctx, span := tracing.Start(ctx, "job.cancel", trace.WithAttributes(tracing.AttrJobID.String(id)))
	defer tracing.End(span, &err)
	if _, err := uuid.Parse(id); err != nil {
		return storage.Job{}, jobNotFound()
	}
	before, err := s.Get(ctx, account, id)
	if err != nil {
		return storage.Job{}, err
	}
	j, err := s.Store.CancelJob(ctx, account, id)
	if errors.Is(err, storage.ErrNotFound) {
		return storage.Job{}, jobNotFound()
	}
	if err != nil {
		return storage.Job{}, apierr.Upstream(err)
	}
	if j.Status != before.Status {
		if storage.Terminal(j.Status) {
			countEnd(j) // a queued job, canceled at once
		}
		s.ExtraData.Delete(j.ID)
		publishStatus(context.WithoutCancel(ctx), s.Bus, j)
	}
	return j, nil
}

// List returns a page of the account's jobs, newest first, and the cursor
// of the next page ("" on the last one).
func (s *Service) List(ctx context.Context, account string, q storage.JobQuery) ([]storage.Job, string, error) {
	if account == "" {
		return nil, "", apierr.Upstream(errors.New("jobs: listing needs an account"))
	}
	q.DeploymentID = s.Config.Deployment
	return s.page(ctx, account, q)
}

// ListEveryAccount is List over every account's jobs: the operator's view.
func (s *Service) ListEveryAccount(ctx context.Context, q storage.JobQuery) ([]storage.Job, string, error) {
	return s.page(ctx, "", q)
}

// page reads one job more than q asks for, which tells whether a next
// page exists.
func (s *Service) page(ctx context.Context, account string, q storage.JobQuery) ([]storage.Job, string, error) {
	q.Limit = storage.JobPageSize(q.Limit)
	want := q.Limit
	q.Limit++
	page, err := s.Store.ListJobs(ctx, account, q)
	if err != nil {
		return nil, "", apierr.Upstream(err)
	}
	if len(page) <= want {
		return page, "", nil
	}
	page = page[:want]
	last := page[want-1]
	return page, EncodeCursor(storage.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}), nil
}

func jobNotFound() error { return apierr.NotFound("job not found") }

// countEnd counts a job that reached its terminal status here (each
// transition happens in exactly one process), with how long it ran.
func countEnd(j storage.Job) {
	metrics.JobsFinished.WithLabelValues(j.Pool, j.Status).Inc()
	if j.StartedAt != nil && j.CompletedAt != nil {
		metrics.JobExecution.WithLabelValues(j.Pool, j.Status).Observe(j.CompletedAt.Sub(*j.StartedAt).Seconds())
	}
}

// countRequeued counts attempts handed back to the queue.
func countRequeued(j storage.Job) {
	if j.Status == storage.JobQueued {
		metrics.AttemptsReclaimed.WithLabelValues(j.Pool).Inc()
	} else if storage.Terminal(j.Status) {
		countEnd(j)
	}
}

// publishStatus tells streams that j changed state; they re-read it.
func publishStatus(ctx context.Context, b bus.Bus, j storage.Job) {
	data, _ := json.Marshal(map[string]string{"status": j.Status})
	_ = b.Publish(ctx, bus.Event{JobID: j.ID, Kind: "status", Data: data})
}

// CancelDeployment cancels every queued and running job of a deployment
// through the ordinary transitions (queued → canceled, running →
// canceling, which its dispatcher then ends as canceled) and tells their
// streams and dispatchers. It returns the jobs it changed.
func (s *Service) CancelDeployment(ctx context.Context, deploymentID string) ([]storage.Job, error) {
	changed, err := s.Store.CancelDeploymentJobs(ctx, deploymentID)
	if err != nil {
		return nil, err
	}
	for _, j := range changed {
		if storage.Terminal(j.Status) {
			s.ExtraData.Delete(j.ID)
		}
		publishStatus(context.WithoutCancel(ctx), s.Bus, j)
	}
	return changed, nil
}

// errorType is an error's code for a span: the API error code when it is
// one (bounded), else "internal".
func errorType(err error) string {
	if e, ok := apierr.As(err); ok {
		return e.Code
	}
	return "internal"
}
