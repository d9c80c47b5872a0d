package calls

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/modules/router/catalog"
	"github.com/comfygate/comfygate/modules/router/limits"
	"github.com/comfygate/comfygate/modules/router/provider"
	"github.com/comfygate/comfygate/storage"
)

// maxPollErrors is how many consecutive failed polls end a generation as
// provider_error (a single network blip must not).
const maxPollErrors = 5

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
	callCtx, cancel := context.WithTimeout(detached, m.Deadline)
	defer cancel()

	handle, out, err := adapter.Submit(callCtx, m, req.Body, req.Header)
	if err != nil {
		if callCtx.Err() != nil {
			// The bound expired before the partner accepted anything we can
			// collect: no Retry-After, and the key is spent (the partner may
			// have started work we cannot see).
			stopKeep()
			s.settle(ctx, lease, 0)
			e := deadlineError(0)
			s.record(ctx, rec, keyed, storage.RouterConsumed, e.Code, e.Status, nil, 0)
			return nil, e.WithCause(err)
		}
		s.log.Debug("router: provider transport failure", zap.String("request_id", req.RequestID), zap.Error(err))
		out = provider.Fail(provider.BucketProviderError, http.StatusBadGateway, "the provider could not be reached or broke off its answer")
	}
	if handle != nil && out == nil {
		rec.ProviderHandle, _ = json.Marshal(handle)
		if keyed {
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
	// The provider has finished: settle now, off the response path (one
	// Redis round trip the caller need not wait for). The lease stays
	// counted until the settle lands, which only errs on the safe side.
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		stopKeep()
		s.settle(detached, lease, charged)
	}()
	bucket, status := out.Bucket, out.Status
	if ctx.Err() != nil {
		bucket, status = BucketClientDisconnected, 499
	}
	s.recordAsync(ctx, rec, keyed, storage.RouterAnswered, bucket, status, out, charged, true)
	if ctx.Err() != nil {
		return nil, routerErr(499, BucketClientDisconnected, "the client closed the request").WithCause(ctx.Err())
	}
	return &Response{Status: out.Status, ContentType: out.ContentType, Body: out.Body, Bucket: out.Bucket}, nil
}

// poll waits for the generation's outcome at the model's poll interval.
func (s *Service) poll(ctx context.Context, a provider.Adapter, m *catalog.Model, h *provider.Handle) (*provider.Outcome, error) {
	return s.pollTouching(ctx, a, m, h, nil)
}

// pollTouching is poll; touch (if set) runs every TakeoverAfter/3 so that
// a collecting record shows its follower is alive.
func (s *Service) pollTouching(ctx context.Context, a provider.Adapter, m *catalog.Model, h *provider.Handle, touch func()) (*provider.Outcome, error) {
	t := time.NewTicker(m.PollInterval)
	defer t.Stop()
	fails := 0
	lastTouch := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
		if touch != nil && time.Since(lastTouch) >= s.cfg.TakeoverAfter/3 {
			touch()
			lastTouch = time.Now()
		}
		out, err := a.Poll(ctx, m, h)
		switch {
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
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
// when the partner can cancel, else followed and charged.
func (s *Service) follow(req Request, rec storage.RouterCall, lease *limits.Lease, stopKeep func(),
	a provider.Adapter, h *provider.Handle) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.CollectWindow)
		defer cancel()
		m := req.Model
		keyed := req.IdempotencyKey != ""
		if !keyed {
			if err := a.Cancel(ctx, m, h); err == nil {
				stopKeep()
				s.settle(ctx, lease, 0)
				s.record(ctx, rec, false, storage.RouterConsumed, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
				return
			}
		}
		var touch func()
		if keyed {
			touch = func() {
				if err := s.cfg.Store.UpdateRouterCall(ctx, collectingRecord(rec)); err != nil {
					s.log.Warn("router: touching a collecting record failed", zap.String("request_id", rec.RequestID), zap.Error(err))
				}
			}
		}
		out, err := s.pollTouching(ctx, a, m, h, touch)
		stopKeep()
		if err != nil {
			_ = a.Cancel(context.Background(), m, h)
			s.settle(ctx, lease, 0)
			s.record(ctx, rec, keyed, storage.RouterConsumed, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
			return
		}
		charged := int64(0)
		if out.Billable {
			charged = m.PriceCents
		}
		s.settle(ctx, lease, charged)
		s.record(ctx, rec, keyed, storage.RouterAnswered, BucketDeadline, http.StatusGatewayTimeout, out, charged)
	}()
}

// settle releases the lease on a detached, bounded context.
func (s *Service) settle(ctx context.Context, lease *limits.Lease, charged int64) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	for range 3 {
		if err = lease.Settle(dctx, charged); err == nil {
			return
		}
	}
	s.log.Warn("router: settling a lease failed; it expires on its own", zap.String("request_id", lease.ID), zap.Error(err))
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
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
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
	if err := s.cfg.Store.UpdateRouterCall(dctx, rec); err != nil {
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
