// Package calls runs one model-router call end to end: idempotency claim,
// admission against the workspace's limits, dispatch to the partner adapter
// under the model's deadline, collection of handle-bearing generations that
// outlive it, settlement of spend, and the durable usage record.
//
// Money rules it keeps:
//   - the provider call, the lease heartbeat and the settlement run on
//     contexts detached from the client (context.WithoutCancel), so a client
//     that disconnects can neither leak a lease nor skip a charge;
//   - spend is settled when the provider finishes, not when the answer is
//     delivered; the settle is ordered before the answer is written, so the
//     caller's next call through this gateway never meets the previous
//     call's lease;
//   - an answered call with an Idempotency-Key is recorded and replayed, and
//     a replay is never charged;
//   - a refusal before dispatch releases the key.
package calls

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/storage"
)

// Router buckets not produced by the provider package.
const (
	BucketConcurrency        = "concurrency_limit_exceeded"
	BucketRateLimited        = "rate_limited"
	BucketInsufficient       = "insufficient_credits"
	BucketServiceUnavailable = provider.BucketServiceUnavailable
	BucketInternal           = "internal_error"
	BucketDeadline           = "deadline_exceeded"
	BucketClientDisconnected = "client_disconnected"
	BucketInvalidInput       = provider.BucketInvalidInput
)

// DefaultCollectWindow is how long a generation that outlived the deadline
// is still followed so that its answer can be collected and charged.
const DefaultCollectWindow = 30 * time.Minute

// DefaultTakeoverAfter: see Config.TakeoverAfter.
const DefaultTakeoverAfter = 30 * time.Second

// settleTimeout bounds the detached settlement and record writes.
const settleTimeout = 10 * time.Second

// Config wires a Service.
type Config struct {
	Limiter limits.Limiter
	// Limits are passed to the limiter.
	Limits limits.Limits
	// Credits, when set, makes every call reserve its price from its
	// workspace's credit ledger (402 insufficient_credits) and settle it.
	Credits  Credits
	Store    storage.RouterStore
	Adapters map[catalog.Adapter]provider.Adapter
	// CollectWindow: see DefaultCollectWindow (0 = default).
	CollectWindow time.Duration
	// TakeoverAfter: a running or collecting record not touched for this
	// long has lost its owner (its gateway died; live owners touch it every
	// TakeoverAfter/3). A same-key retry then takes the generation over when
	// the record holds a provider handle, or declares the call consumed
	// once its deadline plus TakeoverAfter has passed when it holds none.
	// 0 = DefaultTakeoverAfter.
	TakeoverAfter time.Duration
	Logger        *zap.Logger
	// Rehost, when set, copies the results of the answers of models with a
	// rehost rule (catalog.Model.Rehost); nil leaves answers as they are.
	Rehost Rehoster
}

// Service runs calls. It is safe for concurrent use.
type Service struct {
	cfg Config
	log *zap.Logger
	bg  sync.WaitGroup
	rec *recorder
	// bgCtx bounds background work (followers, record touches); Close
	// cancels it and waits, bounded, for the followers to wind down.
	bgCtx    context.Context
	bgCancel context.CancelFunc
	// stopSweep ends the expired-key sweeper.
	stopSweep context.CancelFunc
	swept     chan struct{}
}

// sweepInterval is how often claims of expired Idempotency-Keys are deleted
// (expired claims are already ignored; this only bounds the table).
const sweepInterval = 10 * time.Minute

// New builds a Service.
func New(cfg Config) *Service {
	if cfg.CollectWindow <= 0 {
		cfg.CollectWindow = DefaultCollectWindow
	}
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = DefaultTakeoverAfter
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Service{cfg: cfg, log: log}
	s.bgCtx, s.bgCancel = context.WithCancel(context.Background())
	s.rec = newRecorder(cfg.Store.RecordRouterCalls, log)
	var ctx context.Context
	ctx, s.stopSweep = context.WithCancel(context.Background())
	s.swept = make(chan struct{})
	go s.sweep(ctx)
	return s
}

func (s *Service) sweep(ctx context.Context) {
	defer close(s.swept)
	t := time.NewTicker(sweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if n, err := s.cfg.Store.DeleteExpiredRouterKeys(ctx, time.Now()); err != nil && ctx.Err() == nil {
			s.log.Warn("router: sweeping expired idempotency keys failed", zap.Error(err))
		} else if n > 0 {
			s.log.Debug("router: swept expired idempotency keys", zap.Int("count", n))
		}
		s.sweepCredits(ctx)
	}
}

// Wait blocks until background collections have finished (for tests).
func (s *Service) Wait() { s.bg.Wait() }

// closeWait bounds how long Close waits for followers to wind down.
const closeWait = 15 * time.Second

// Close stops background work and flushes queued usage records. Followers
// are told to stop: a keyed one settles its lease and leaves its record
// collecting, so a same-key retry on any gateway takes the generation over;
// a keyless one records what it knows. Close waits for them at most
// closeWait. Calls made after Close write their records synchronously.
func (s *Service) Close() {
	s.stopSweep()
	<-s.swept
	s.bgCancel()
	done := make(chan struct{})
	go func() {
		s.bg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		s.log.Warn("router: background collections did not stop in time", zap.Duration("waited", closeWait))
	}
	s.rec.close()
}

// Request is one call.
type Request struct {
	RequestID string
	Workspace string
	Model     *catalog.Model
	Body      []byte
	// Header is the client's request header; the adapter forwards only safe members.
	Header http.Header
	// IdempotencyKey (already validated, 1–255 chars) and Fingerprint (a
	// digest of method, path and body) bind the key to this request.
	IdempotencyKey string
	Fingerprint    string
	// ContentBase is the base URL of the asset API the content URLs of
	// rehosted results are built on (rehost.Target.ContentBase).
	ContentBase string
}

// Response is what the router answers for a call that reached the partner
// or was replayed: the handler writes it verbatim (plus
// X-Service-Error-Type when Bucket is set).
type Response struct {
	Status      int
	ContentType string
	Body        []byte
	Bucket      string
	Header      http.Header
}

func (r *Response) header() http.Header {
	if r.Header == nil {
		r.Header = http.Header{}
	}
	return r.Header
}

func routerErr(status int, bucket, msg string) *apierr.Error {
	return apierr.New(status, bucket, msg)
}

// ClientClosed is the answer (logged, never read) to a caller that hung up.
func ClientClosed() *apierr.Error {
	return routerErr(499, BucketClientDisconnected, "the client closed the request")
}

// recordStoreUnavailable is the answer when the call records cannot be
// read or written.
func recordStoreUnavailable(err error) *apierr.Error {
	return routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
		"the call record store is unavailable; retry with backoff").WithCause(err)
}

// retryAfterSeconds rounds a poll interval up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Call runs req. It returns a Response for anything the partner answered
// (or a replay), and an *apierr.Error for the router's own refusals.
func (s *Service) Call(ctx context.Context, req Request) (resp *Response, err error) {
	m := req.Model
	// The span's attributes are set once, at its end: each SetAttributes
	// (and attributes at start) grows the span's attribute slice anew.
	ctx, span := tracing.Start(ctx, "router.call")
	defer func() {
		if span.IsRecording() {
			attrs := [4]attribute.KeyValue{tracing.AttrCallID.String(req.RequestID), semconv.GenAIRequestModel(m.ID)}
			n := 2
			bucket, status := "", 0
			if e, ok := apierr.As(err); ok {
				bucket, status = e.Code, e.Status
			} else if resp != nil {
				bucket, status = resp.Bucket, resp.Status
			}
			if bucket != "" {
				attrs[n] = tracing.AttrBucket.String(bucket)
				n++
			}
			if status != 0 {
				attrs[n] = semconv.HTTPResponseStatusCode(status)
				n++
			}
			span.SetAttributes(attrs[:n]...)
		}
		if err == nil && resp != nil {
			// An answer with a bucket (the partner's error, a refused
			// or empty output, a replay of one) is a failed call too.
			tracing.FailAs(span, resp.Bucket)
		}
		tracing.End(span, &err)
	}()
	rec := storage.RouterCall{
		RequestID: req.RequestID, WorkspaceID: req.Workspace, ModelID: m.ID,
		State:         storage.RouterRunning,
		ReservedCents: m.PriceCents, IdempotencyKey: req.IdempotencyKey, Fingerprint: req.Fingerprint,
	}
	keyed := req.IdempotencyKey != ""
	if keyed {
		holder, err := s.cfg.Store.CreateRouterCall(ctx, rec, storage.RouterIdempotencyTTL)
		if errors.Is(err, storage.ErrDuplicate) && holder.RequestID != "" {
			return s.existing(ctx, req, holder)
		}
		if err != nil {
			return nil, recordStoreUnavailable(err)
		}
	}
	// A keyed call's record can be taken over by a same-key retry, which
	// settles the lease by the call's id (limits.Resume).
	call := limits.Call{ID: req.RequestID, Cents: m.PriceCents, Resumable: keyed}
	admitting := time.Now()
	lease, err := s.cfg.Limiter.Admit(ctx, req.Workspace, call, s.cfg.Limits)
	if err != nil {
		e := admissionError(err)
		tracing.Phase(span, "router.admission", admitting, tracing.AttrBucket.String(e.Code))
		s.refused(ctx, rec, keyed, e)
		return nil, e
	}
	if e := s.reserveCredits(ctx, req); e != nil {
		tracing.Phase(span, "router.admission", admitting, tracing.AttrBucket.String(e.Code))
		s.releaseLease(ctx, lease)
		s.refused(ctx, rec, keyed, e)
		return nil, e
	}
	tracing.Phase(span, "router.admission", admitting)
	metrics.RouterSpendReserved.Add(float64(m.PriceCents))
	return s.dispatch(ctx, req, rec, lease)
}

// admissionError maps a limiter failure to the router bucket.
func admissionError(err error) *apierr.Error {
	var ref *limits.Refusal
	switch {
	case errors.As(err, &ref):
		metrics.RouterLimitRefusals.WithLabelValues(string(ref.Reason)).Inc()
		switch ref.Reason {
		case limits.ReasonRate:
			return routerErr(http.StatusTooManyRequests, BucketRateLimited, ref.Detail()).
				WithRetryAfter(ref.RetryAfterSeconds()).WithCause(err)
		}
		e := routerErr(http.StatusTooManyRequests, BucketConcurrency, ref.Detail()).WithCause(err)
		e.Header = ref.SpendHeaders()
		return e
	case errors.Is(err, limits.ErrUnavailable):
		return routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
			"usage limits cannot be checked right now; retry with backoff").WithCause(err)
	}
	return routerErr(http.StatusInternalServerError, BucketInternal, "the router failed to admit the call").WithCause(err)
}

// releaseKey frees rec's Idempotency-Key for a retry; rec stays as the
// call's record. A failed release leaves the key spent (logged).
func (s *Service) releaseKey(ctx context.Context, rec storage.RouterCall) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := s.cfg.Store.ReleaseRouterKey(dctx, rec.WorkspaceID, rec.IdempotencyKey, rec.RequestID); err != nil {
		s.log.Warn("router: releasing the key of a call past its deadline failed", zap.String("request_id", rec.RequestID), zap.Error(err))
	}
}

// refused records a refusal before dispatch and releases the key.
func (s *Service) refused(ctx context.Context, rec storage.RouterCall, keyed bool, e *apierr.Error) {
	now := time.Now().UTC()
	rec.State, rec.Bucket, rec.HTTPStatus, rec.FinishedAt = storage.RouterReleased, e.Code, e.Status, &now
	var err error
	if keyed {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		if err = s.cfg.Store.ReleaseRouterKey(dctx, rec.WorkspaceID, rec.IdempotencyKey, rec.RequestID); err == nil {
			err = s.cfg.Store.UpdateRouterCall(dctx, rec)
		}
	} else {
		rec.IdempotencyKey = ""
		s.rec.enqueue(rec)
	}
	if err != nil {
		s.log.Warn("router: recording a refused call failed", zap.String("request_id", rec.RequestID), zap.Error(err))
	}
}
