package calls

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/storage"
)

// maxPollErrors is how many consecutive failed polls end a generation as
// provider_error (a single network blip must not).
const maxPollErrors = 5

// Bounds of the partner exchanges that run after the client's deadline.
const (
	// cancelTimeout bounds one cancel request.
	cancelTimeout = 10 * time.Second
	// cancelSettleWindow is how long a generation is still polled after a
	// cancel was requested, to learn whether it ended billable (it may have
	// completed before the cancel landed).
	cancelSettleWindow = 2 * time.Minute
)

// dispatch sends an admitted call to its partner and waits for the answer
// within the model's deadline.
func (s *Service) dispatch(ctx context.Context, req Request, rec storage.RouterCall, lease *limits.Lease) (*Response, error) {
	m := req.Model
	keyed := req.IdempotencyKey != ""
	adapter, ok := s.cfg.Adapters[m.Adapter]
	if !ok {
		e := routerErr(http.StatusInternalServerError, BucketInternal, "the model's adapter is not available")
		s.settle(ctx, lease, 0)
		s.refused(ctx, rec, keyed, e)
		return nil, e
	}
	// Everything from here on survives the client: the partner works (and
	// bills) whether or not the caller is still listening.
	detached := context.WithoutCancel(ctx)
	stopKeep := lease.KeepAlive(detached, func(err error) {
		s.log.Warn("router: lease heartbeat failed", zap.String("request_id", req.RequestID), zap.Error(err))
	})
	if keyed {
		// Show that this gateway owns the record while the partner works,
		// so that only a dead gateway's call is taken over.
		stopTouch := s.keepFresh(detached, rec.RequestID)
		defer stopTouch()
	}
	callCtx, cancel := context.WithTimeout(detached, m.Deadline)
	defer cancel()

	handle, out, err := adapter.Submit(callCtx, m, req.Body, req.Header)
	if err != nil {
		var e *apierr.Error
		switch {
		case callCtx.Err() != nil:
			// The bound expired before the partner accepted anything we can
			// collect: no Retry-After, and the key is released, so that a
			// retry with it runs the call again, as the contract's 504
			// rules say (a new key would do no less: the partner may have
			// started work nobody can collect either way).
			e = deadlineError(0)
		case errors.Is(err, provider.ErrResponseBudget):
			// The partner answered but the process had no room to read it.
			// Nothing to replay, and the key is spent like on a deadline.
			e = routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
				"the router is short of memory for partner answers; retry with backoff")
		}
		if e != nil {
			stopKeep()
			s.settle(ctx, lease, 0)
			bucket, status := e.Code, e.Status
			if ctx.Err() != nil {
				// The caller left before the bound: that is what the
				// record says happened first (the answer goes nowhere).
				bucket, status = BucketClientDisconnected, 499
			}
			s.record(ctx, rec, keyed, storage.RouterConsumed, bucket, status, nil, 0)
			if keyed && e.Code == BucketDeadline {
				s.releaseKey(ctx, rec)
			}
			return nil, e.WithCause(err)
		}
		s.log.Debug("router: provider transport failure", zap.String("request_id", req.RequestID), zap.Error(err))
		out = provider.Fail(provider.BucketProviderError, http.StatusBadGateway, "the provider could not be reached or broke off its answer")
	}
	if handle != nil && out == nil {
		rec.ProviderHandle, _ = json.Marshal(handle)
		if keyed {
			// Stored as soon as the partner accepted: from now on the
			// generation is collectable even if this gateway dies.
			if err := s.cfg.Store.UpdateRouterCall(detached, rec); err != nil {
				s.log.Warn("router: storing the provider handle failed", zap.String("request_id", req.RequestID), zap.Error(err))
			}
		}
		out, err = s.poll(callCtx, adapter, m, handle)
		if err != nil {
			retry := 0
			if keyed {
				retry = retryAfterSeconds(m.PollInterval)
				s.record(ctx, rec, true, storage.RouterCollecting, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
			}
			s.follow(req, rec, lease, stopKeep, adapter, handle)
			return nil, deadlineError(retry).WithCause(err)
		}
	}
	charged := int64(0)
	if out.Billable {
		charged = m.PriceCents
	}
	// The provider has finished: settle before the answer is written. The
	// settle is ordered, not awaited: once SettleOrdered returns, any later
	// admission through this gateway runs after it, so the caller's next
	// call never finds this one still holding its slot or its cents.
	stopKeep()
	settling := time.Now()
	s.settleOrdered(lease, charged)
	tracing.Phase(trace.SpanFromContext(ctx), "router.settle", settling, tracing.AttrCredits.Int64(charged))
	failed := s.rehost(ctx, req, out)
	rec.RehostFailed = failed // a replay repeats the header
	bucket, status := out.Bucket, out.Status
	if ctx.Err() != nil {
		bucket, status = BucketClientDisconnected, 499
	}
	s.recordAsync(ctx, rec, keyed, storage.RouterAnswered, bucket, status, out, charged, true)
	if ctx.Err() != nil {
		return nil, ClientClosed().WithCause(ctx.Err())
	}
	resp := &Response{Status: out.Status, ContentType: out.ContentType, Body: out.Body, Bucket: out.Bucket}
	setRehostFailed(resp, failed)
	return resp, nil
}

// keepFresh touches the record every TakeoverAfter/3 on its own ticker
// (independent of the poll interval, which may be longer) until stop is
// called, ctx ends or the record is no longer live (then someone else
// finished it and there is nothing left to show).
func (s *Service) keepFresh(ctx context.Context, requestID string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(max(s.cfg.TakeoverAfter/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			tctx, tcancel := context.WithTimeout(ctx, settleTimeout)
			live, err := s.cfg.Store.TouchRouterCall(tctx, requestID)
			tcancel()
			switch {
			case err != nil && ctx.Err() == nil:
				s.log.Warn("router: touching a call record failed", zap.String("request_id", requestID), zap.Error(err))
			case err == nil && !live:
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// poll waits for the generation's outcome at the model's poll interval. A
// poll that failed for lack of response memory is retried without counting
// against maxPollErrors: the generation is fine, the process is busy.
func (s *Service) poll(ctx context.Context, a provider.Adapter, m *catalog.Model, h *provider.Handle) (*provider.Outcome, error) {
	t := time.NewTicker(m.PollInterval)
	defer t.Stop()
	fails := 0
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		out, err := a.Poll(ctx, m, h)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(err, provider.ErrResponseBudget):
		case err != nil:
			if fails++; fails >= maxPollErrors {
				return provider.Fail(provider.BucketProviderError, http.StatusBadGateway,
					"the provider stopped answering about the generation"), nil
			}
		case out != nil:
			return out, nil
		default:
			fails = 0
		}
	}
}

// follow keeps a generation that outlived the deadline under watch in the
// background, holding its lease, so that it is charged once when it
// completes and its answer is recorded for the caller's same-key retry. A
// call without a key has no one to collect it: the generation is cancelled
// when the partner can cancel, and still polled until the partner reports
// its final state, because a generation that completed before the cancel
// landed is billed (and so charged) regardless of delivery.
func (s *Service) follow(req Request, rec storage.RouterCall, lease *limits.Lease, stopKeep func(),
	a provider.Adapter, h *provider.Handle) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(s.bgCtx, s.cfg.CollectWindow)
		defer cancel()
		if req.IdempotencyKey != "" {
			s.followKeyed(ctx, req, rec, lease, stopKeep, a, h)
			return
		}
		s.followKeyless(ctx, req, rec, lease, stopKeep, a, h)
	}()
}

func (s *Service) followKeyed(ctx context.Context, req Request, rec storage.RouterCall, lease *limits.Lease, stopKeep func(),
	a provider.Adapter, h *provider.Handle) {
	m := req.Model
	stopTouch := s.keepFresh(ctx, rec.RequestID)
	out, err := s.poll(ctx, a, m, h)
	stopTouch()
	stopKeep()
	switch {
	case err != nil && s.bgCtx.Err() != nil:
		// The service is closing: free the slot (no charge, no guard) and
		// leave the record collecting with its handle, and its credits
		// reserved; a same-key retry on any gateway takes it over and
		// charges it.
		s.releaseLease(ctx, lease)
		s.log.Info("router: stopped following a generation; a same-key retry will collect it",
			zap.String("request_id", rec.RequestID))
	case err != nil:
		s.cancelBounded(a, m, h)
		s.settle(ctx, lease, 0)
		s.record(ctx, rec, true, storage.RouterConsumed, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
	default:
		s.finish(ctx, req, rec, true, lease, out)
	}
}

func (s *Service) followKeyless(ctx context.Context, req Request, rec storage.RouterCall, lease *limits.Lease, stopKeep func(),
	a provider.Adapter, h *provider.Handle) {
	m := req.Model
	defer stopKeep()
	pollCtx := ctx
	if err := s.cancelBounded(a, m, h); err == nil {
		// The partner took the cancel (or the generation had already
		// completed): poll, bounded, for its final state.
		var pcancel context.CancelFunc
		pollCtx, pcancel = context.WithTimeout(ctx, cancelSettleWindow)
		defer pcancel()
	}
	out, err := s.poll(pollCtx, a, m, h)
	if err != nil {
		s.log.Warn("router: the final state of a cancelled or abandoned generation is unknown; not charged",
			zap.String("request_id", rec.RequestID), zap.Error(err))
		s.settle(ctx, lease, 0)
		s.record(ctx, rec, false, storage.RouterConsumed, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
		return
	}
	s.finish(ctx, req, rec, false, lease, out)
}

// finish settles and records a followed generation's final outcome.
func (s *Service) finish(ctx context.Context, req Request, rec storage.RouterCall, keyed bool, lease *limits.Lease, out *provider.Outcome) {
	charged := int64(0)
	if out.Billable {
		charged = req.Model.PriceCents
	}
	s.settle(ctx, lease, charged)
	if keyed {
		// Only a keyed answer is read again (a same-key retry collects it).
		rec.RehostFailed = s.rehost(ctx, req, out)
	}
	s.record(ctx, rec, keyed, storage.RouterAnswered, BucketDeadline, http.StatusGatewayTimeout, out, charged)
}

// cancelBounded asks the partner to stop the generation, bounded by
// cancelTimeout and independent of the (possibly ended) follow context.
func (s *Service) cancelBounded(a provider.Adapter, m *catalog.Model, h *provider.Handle) error {
	ctx, cancel := context.WithTimeout(context.Background(), cancelTimeout)
	defer cancel()
	err := a.Cancel(ctx, m, h)
	if err != nil && !errors.Is(err, provider.ErrNoCancel) {
		s.log.Debug("router: cancelling a generation failed", zap.Error(err))
	}
	return err
}

// settle ends the call's hold on its limits and credits: the credit
// reservation is settled for charged and the lease released, on detached,
// bounded contexts.
func (s *Service) settle(ctx context.Context, lease *limits.Lease, charged int64) {
	defer tracing.Phase(trace.SpanFromContext(ctx), "router.settle", time.Now(), tracing.AttrCredits.Int64(charged))
	metrics.RouterSpendSettled.Add(float64(charged))
	s.settleCredits(ctx, lease.ID, charged)
	s.releaseLease(ctx, lease)
}

// releaseLease releases the lease on a detached, bounded context (and
// nothing else: a call someone else will settle keeps its credits
// reserved).
func (s *Service) releaseLease(ctx context.Context, lease *limits.Lease) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	for range 3 {
		if err = lease.Settle(dctx); err == nil {
			return
		}
	}
	s.log.Warn("router: settling a lease failed; it expires on its own", zap.String("request_id", lease.ID), zap.Error(err))
}

// settleOrdered settles the call's credits (synchronously, so that the
// caller's next call sees the balance this one left) and releases the
// lease with Lease.SettleOrdered; a failure of the release is retried in
// the background like settle.
func (s *Service) settleOrdered(lease *limits.Lease, charged int64) {
	metrics.RouterSpendSettled.Add(float64(charged))
	s.settleCredits(context.Background(), lease.ID, charged)
	s.bg.Add(1)
	lease.SettleOrdered(func(err error) {
		if err == nil {
			s.bg.Done()
			return
		}
		go func() {
			defer s.bg.Done()
			s.releaseLease(context.Background(), lease)
		}()
	})
}

// record writes the call's final state: an update for keyed calls (created
// at the claim), one insert for the others.
func (s *Service) record(ctx context.Context, rec storage.RouterCall, keyed bool, state, bucket string, status int,
	out *provider.Outcome, charged int64) {
	s.recordAsync(ctx, rec, keyed, state, bucket, status, out, charged, false)
}

// recordAsync is record; with async, a keyless record is queued for the
// background writers instead of written on the request path.
func (s *Service) recordAsync(ctx context.Context, rec storage.RouterCall, keyed bool, state, bucket string, status int,
	out *provider.Outcome, charged int64, async bool) {
	now := time.Now().UTC()
	rec.State, rec.Bucket, rec.HTTPStatus, rec.ChargedCents = state, bucket, status, charged
	if state != storage.RouterCollecting {
		rec.FinishedAt = &now
	}
	if out != nil {
		rec.ResponseStatus, rec.ResponseContentType = out.Status, out.ContentType
		if len(out.Body) <= storage.MaxRouterResponseBytes {
			rec.ResponseBody, rec.Replayable = out.Body, true
		}
	}
	if !keyed {
		// Nothing replays a keyless call: keep the audit facts, not the body.
		rec.IdempotencyKey, rec.ResponseBody, rec.Replayable = "", nil, false
		if async {
			s.rec.enqueue(rec)
			return
		}
		s.rec.writeLogged([]storage.RouterCall{rec})
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	err := s.cfg.Store.UpdateRouterCall(dctx, rec)
	if errors.Is(err, storage.ErrRouterCallFinished) {
		s.log.Info("router: the call was already finished by another owner", zap.String("request_id", rec.RequestID),
			zap.String("state", state))
		return
	}
	if err != nil {
		s.log.Error("router: writing the usage record failed", zap.String("request_id", rec.RequestID),
			zap.String("state", state), zap.Int64("charged_cents", charged), zap.Error(err))
	}
}

// replayBucket recovers a recorded answer's bucket from the answer itself.
func replayBucket(status int, body []byte) string {
	if status < 400 {
		return ""
	}
	if status == http.StatusUnprocessableEntity {
		return BucketInvalidInput
	}
	var b struct {
		ErrorType string `json:"error_type"`
	}
	if json.Unmarshal(body, &b) == nil && b.ErrorType != "" {
		return b.ErrorType
	}
	return BucketInternal
}

// collectingRecord is rec as written when the deadline handed it to follow.
func collectingRecord(rec storage.RouterCall) storage.RouterCall {
	rec.State, rec.Bucket, rec.HTTPStatus = storage.RouterCollecting, BucketDeadline, http.StatusGatewayTimeout
	return rec
}
