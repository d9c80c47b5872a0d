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
//     delivered;
//   - an answered call with an Idempotency-Key is recorded and replayed, and
//     a replay is never charged;
//   - a refusal before dispatch releases the key.
package calls

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/modules/apierr"
	"github.com/comfygate/comfygate/modules/router/catalog"
	"github.com/comfygate/comfygate/modules/router/limits"
	"github.com/comfygate/comfygate/modules/router/provider"
	"github.com/comfygate/comfygate/storage"
)

// Router buckets not produced by the provider package.
const (
	BucketConcurrency        = "concurrency_limit_exceeded"
	BucketRateLimited        = "rate_limited"
	BucketInsufficient       = "insufficient_credits"
	BucketServiceUnavailable = "service_unavailable"
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
	Limiter  limits.Limiter
	Limits   limits.Limits
	Store    storage.RouterStore
	Adapters map[catalog.Adapter]provider.Adapter
	// CollectWindow: see DefaultCollectWindow (0 = default).
	CollectWindow time.Duration
	// TakeoverAfter: a collecting record not touched for this long has lost
	// its follower (its gateway died); a same-key retry then polls the
	// partner itself. 0 = DefaultTakeoverAfter.
	TakeoverAfter time.Duration
	Logger        *zap.Logger
}

// Service runs calls. It is safe for concurrent use.
type Service struct {
	cfg Config
	log *zap.Logger
	bg  sync.WaitGroup
	rec *recorder
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
	}
}

// Wait blocks until background collections have finished (for tests).
func (s *Service) Wait() { s.bg.Wait() }

// Close flushes queued usage records and stops their writers. Calls made
// after Close write their records synchronously. Background collections
// keep running (they finish paid generations) and write synchronously.
func (s *Service) Close() {
	s.stopSweep()
	<-s.swept
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

// retryAfterSeconds rounds a poll interval up to whole seconds, at least 1.
func retryAfterSeconds(d time.Duration) int {
	return max(1, int((d+time.Second-1)/time.Second))
}

// Call runs req. It returns a Response for anything the partner answered
// (or a replay), and an *apierr.Error for the router's own refusals.
func (s *Service) Call(ctx context.Context, req Request) (*Response, error) {
	m := req.Model
	rec := storage.RouterCall{
		RequestID: req.RequestID, WorkspaceID: req.Workspace, ModelID: m.ID,
		ReservedCents: m.PriceCents, IdempotencyKey: req.IdempotencyKey, Fingerprint: req.Fingerprint,
	}
	keyed := req.IdempotencyKey != ""
	if keyed {
		holder, err := s.cfg.Store.CreateRouterCall(ctx, rec, storage.RouterIdempotencyTTL)
		if errors.Is(err, storage.ErrDuplicate) && holder.RequestID != "" {
			return s.existing(ctx, req, holder)
		}
		if err != nil {
			return nil, routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
				"the call record store is unavailable; retry with backoff").WithCause(err)
		}
	}
	lease, err := s.cfg.Limiter.Admit(ctx, req.Workspace, limits.Call{ID: req.RequestID, Cents: m.PriceCents}, s.cfg.Limits)
	if err != nil {
		e := admissionError(err)
		s.refused(ctx, rec, keyed, e)
		return nil, e
	}
	return s.dispatch(ctx, req, rec, lease)
}

// admissionError maps a limiter failure to the router bucket.
func admissionError(err error) *apierr.Error {
	var ref *limits.Refusal
	switch {
	case errors.As(err, &ref):
		switch ref.Reason {
		case limits.ReasonRate:
			return routerErr(http.StatusTooManyRequests, BucketRateLimited, ref.Detail()).
				WithRetryAfter(ref.RetryAfterSeconds()).WithCause(err)
		case limits.ReasonCredits:
			return routerErr(http.StatusPaymentRequired, BucketInsufficient, ref.Detail()).WithCause(err)
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

// refused records a refusal before dispatch and releases the key.
func (s *Service) refused(ctx context.Context, rec storage.RouterCall, keyed bool, e *apierr.Error) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	now := time.Now().UTC()
	rec.State, rec.Bucket, rec.HTTPStatus, rec.FinishedAt = storage.RouterReleased, e.Code, e.Status, &now
	var err error
	if keyed {
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

// existing answers a request whose key another call holds.
func (s *Service) existing(ctx context.Context, req Request, holder storage.RouterCall) (*Response, error) {
	if holder.Fingerprint != req.Fingerprint {
		return nil, routerErr(http.StatusConflict, BucketInvalidInput,
			"this Idempotency-Key was used with a different request; use a new key")
	}
	switch holder.State {
	case storage.RouterAnswered:
		return replay(holder)
	case storage.RouterRunning:
		return nil, routerErr(http.StatusConflict, BucketConcurrency,
			"a call with this Idempotency-Key is still running; retry later with the same key").
			WithRetryAfter(retryAfterSeconds(req.Model.PollInterval))
	case storage.RouterCollecting:
		return s.collect(ctx, req, holder)
	}
	return nil, routerErr(http.StatusConflict, BucketInvalidInput,
		"the call with this Idempotency-Key ended without a replayable answer; use a new key")
}

// replay answers from a recorded call. A replay is never charged.
func replay(rec storage.RouterCall) (*Response, error) {
	if !rec.Replayable {
		return nil, routerErr(http.StatusConflict, BucketInvalidInput,
			"the answer for this Idempotency-Key is too large to replay; use a new key")
	}
	r := &Response{Status: rec.ResponseStatus, ContentType: rec.ResponseContentType, Body: rec.ResponseBody,
		Bucket: replayBucket(rec.ResponseStatus, rec.ResponseBody)}
	r.header().Set("Idempotent-Replayed", "true")
	return r, nil
}

// collect waits, up to the model's deadline, for a generation that an
// earlier call left running past its deadline, and answers its recorded
// result. The call that holds the handle follows the generation and charges
// it; this one only reads the record, so nothing is submitted or charged twice.
func (s *Service) collect(ctx context.Context, req Request, holder storage.RouterCall) (*Response, error) {
	m := req.Model
	deadline := time.NewTimer(m.Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(min(m.PollInterval, time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, routerErr(499, BucketClientDisconnected, "the client closed the request").WithCause(ctx.Err())
		case <-deadline.C:
			return nil, deadlineError(retryAfterSeconds(m.PollInterval))
		case <-tick.C:
		}
		rec, err := s.cfg.Store.GetRouterCall(ctx, holder.RequestID)
		if err != nil {
			if ctx.Err() != nil {
				continue
			}
			return nil, routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
				"the call record store is unavailable; retry with backoff").WithCause(err)
		}
		switch rec.State {
		case storage.RouterAnswered:
			return replay(rec)
		case storage.RouterCollecting:
			if time.Since(rec.UpdatedAt) > s.cfg.TakeoverAfter {
				return s.takeover(ctx, req, rec, deadline.C)
			}
			continue
		case storage.RouterRunning:
			continue
		}
		return nil, routerErr(http.StatusConflict, BucketInvalidInput,
			"the generation for this Idempotency-Key ended without a replayable answer; use a new key")
	}
}

// deadlineError is the 504; retryAfter 0 means nothing to collect.
func deadlineError(retryAfter int) *apierr.Error {
	msg := "the call did not finish within the router's deadline; retry the same request"
	if retryAfter > 0 {
		msg = "the call did not finish within the router's deadline; retry with the same Idempotency-Key to collect the result"
	}
	return routerErr(http.StatusGatewayTimeout, BucketDeadline, msg).WithRetryAfter(retryAfter)
}

// takeover collects a generation whose follower died (its record stopped
// being touched): this call polls the partner with the stored handle and
// records the answer. The charge is written to the usage record; the dead
// gateway's lease has expired, so no limiter settlement remains.
func (s *Service) takeover(ctx context.Context, req Request, rec storage.RouterCall, deadline <-chan time.Time) (*Response, error) {
	m := req.Model
	var h provider.Handle
	a, ok := s.cfg.Adapters[m.Adapter]
	if !ok || json.Unmarshal(rec.ProviderHandle, &h) != nil {
		return nil, routerErr(http.StatusConflict, BucketInvalidInput,
			"the generation for this Idempotency-Key cannot be collected; use a new key")
	}
	s.log.Info("router: taking over a collection whose follower stopped", zap.String("request_id", rec.RequestID))
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	go func() {
		select {
		case <-deadline:
			cancel()
		case <-pctx.Done():
		}
	}()
	out, err := s.poll(pctx, a, m, &h)
	if err != nil {
		return nil, deadlineError(retryAfterSeconds(m.PollInterval))
	}
	charged := int64(0)
	if out.Billable {
		charged = m.PriceCents
	}
	s.record(ctx, rec, true, storage.RouterAnswered, BucketDeadline, http.StatusGatewayTimeout, out, charged)
	r := &Response{Status: out.Status, ContentType: out.ContentType, Body: out.Body, Bucket: out.Bucket}
	r.header().Set("Idempotent-Replayed", "true")
	return r, nil
}
