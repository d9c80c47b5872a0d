package calls

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/storage"
)

// existing answers a request whose key another call holds.
//
//   - answered: the recorded answer is replayed (never charged again);
//   - running and fresh (its owner touched it within TakeoverAfter): 409
//     concurrency_limit_exceeded + Retry-After, as the contract says;
//   - collecting, or running but stale (its gateway died): collected, see
//     collect;
//   - released or consumed: 409 invalid_input, use a new key.
func (s *Service) existing(ctx context.Context, req Request, holder storage.RouterCall) (*Response, error) {
	if holder.Fingerprint != req.Fingerprint {
		return nil, routerErr(http.StatusConflict, BucketInvalidInput,
			"this Idempotency-Key was used with a different request; use a new key")
	}
	switch holder.State {
	case storage.RouterAnswered:
		return replay(holder)
	case storage.RouterRunning:
		if !s.stale(holder) {
			return nil, stillRunning(req)
		}
		return s.collect(ctx, req, holder)
	case storage.RouterCollecting:
		return s.collect(ctx, req, holder)
	}
	return nil, consumedError()
}

func stillRunning(req Request) error {
	return routerErr(http.StatusConflict, BucketConcurrency,
		"a call with this Idempotency-Key is still running; retry later with the same key").
		WithRetryAfter(retryAfterSeconds(req.Model.PollInterval))
}

func consumedError() error {
	return routerErr(http.StatusConflict, BucketInvalidInput,
		"the call with this Idempotency-Key ended without a replayable answer; use a new key")
}

// stale reports a live record whose owner stopped touching it. It is a hint
// read with this gateway's clock; the takeover itself is decided by the
// store (ClaimStaleRouterCall), so two retries cannot both take over.
func (s *Service) stale(rec storage.RouterCall) bool {
	return time.Since(rec.UpdatedAt) >= s.cfg.TakeoverAfter
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
	setRehostFailed(r, rec.RehostFailed)
	return r, nil
}

// collect waits, up to the model's deadline, for a generation an earlier
// call left running, and answers its recorded result. Its owner (the call
// that holds the handle, or a gateway that took it over) follows the
// generation and charges it; this request only reads the record, so nothing
// is submitted or charged twice. When the owner has gone quiet for
// TakeoverAfter this request takes the generation over (see takeOver).
func (s *Service) collect(ctx context.Context, req Request, holder storage.RouterCall) (*Response, error) {
	m := req.Model
	deadline := time.NewTimer(m.Deadline)
	defer deadline.Stop()
	tick := time.NewTicker(min(m.PollInterval, time.Second))
	defer tick.Stop()
	rec := holder
	for {
		switch rec.State {
		case storage.RouterAnswered:
			return replay(rec)
		case storage.RouterRunning, storage.RouterCollecting:
			if s.stale(rec) {
				if err := s.takeOver(ctx, req, rec); err != nil {
					return nil, err
				}
			}
		default:
			return nil, consumedError()
		}
		select {
		case <-ctx.Done():
			return nil, ClientClosed().WithCause(ctx.Err())
		case <-deadline.C:
			retry := 0
			if len(rec.ProviderHandle) > 0 {
				retry = retryAfterSeconds(m.PollInterval)
			}
			return nil, deadlineError(retry)
		case <-tick.C:
		}
		var err error
		if rec, err = s.cfg.Store.GetRouterCall(ctx, holder.RequestID); err != nil {
			if ctx.Err() != nil {
				continue
			}
			return nil, recordStoreUnavailable(err)
		}
	}
}

// takeOver adopts a generation whose owner died. It claims the record in
// the store (one winner among concurrent retries); the winner starts a
// follower on this gateway that polls the partner with the stored handle,
// touches the record, records the answer and settles the charge under the
// limiter's settled-call guard. A record without a handle has nothing to
// collect: once its deadline plus TakeoverAfter has passed it is consumed
// (the partner may have started work we cannot see, so the key is spent, as
// for an http call that hit the deadline) and the answer is 409
// invalid_input. A nil error means: keep waiting on the record.
func (s *Service) takeOver(ctx context.Context, req Request, rec storage.RouterCall) error {
	m := req.Model
	var h provider.Handle
	hasHandle := len(rec.ProviderHandle) > 0 && json.Unmarshal(rec.ProviderHandle, &h) == nil
	a, ok := s.cfg.Adapters[m.Adapter]
	if !hasHandle && time.Since(rec.CreatedAt) < m.Deadline+s.cfg.TakeoverAfter {
		if rec.State == storage.RouterRunning {
			return stillRunning(req)
		}
		return nil
	}
	won, err := s.cfg.Store.ClaimStaleRouterCall(ctx, rec.RequestID, s.cfg.TakeoverAfter)
	if err != nil {
		return recordStoreUnavailable(err)
	}
	if !won {
		return nil // another retry took it over, or the owner woke up
	}
	if !hasHandle || !ok {
		s.log.Info("router: a call without a collectable handle lost its gateway; its key is consumed",
			zap.String("request_id", rec.RequestID))
		s.record(ctx, rec, true, storage.RouterConsumed, BucketDeadline, http.StatusGatewayTimeout, nil, 0)
		s.settleCredits(ctx, rec.RequestID, 0) // not charged, as the record says
		return consumedError()
	}
	// The resumed lease settles the limiter's hold; the follower settles
	// the call's credit reservation by its id (settle).
	lease, err := limits.Resume(s.cfg.Limiter, rec.WorkspaceID, rec.RequestID)
	if err != nil {
		return routerErr(http.StatusInternalServerError, BucketInternal, "the router failed to resume the call").WithCause(err)
	}
	s.log.Info("router: taking over a generation whose gateway stopped", zap.String("request_id", rec.RequestID))
	if rec.State != storage.RouterCollecting {
		if err := s.cfg.Store.UpdateRouterCall(ctx, collectingRecord(rec)); err != nil && !errors.Is(err, storage.ErrRouterCallFinished) {
			s.log.Warn("router: marking a taken-over call collecting failed", zap.String("request_id", rec.RequestID), zap.Error(err))
		}
	}
	// The follower settles the resumed lease; it holds no slot to heartbeat.
	owner := req
	owner.RequestID = rec.RequestID
	s.follow(owner, rec, lease, func() {}, a, &h)
	return nil
}

// deadlineError is the 504; retryAfter 0 means nothing to collect.
func deadlineError(retryAfter int) *apierr.Error {
	msg := "the call did not finish within the router's deadline; retry the same request"
	if retryAfter > 0 {
		msg = "the call did not finish within the router's deadline; retry with the same Idempotency-Key to collect the result"
	}
	return routerErr(http.StatusGatewayTimeout, BucketDeadline, msg).WithRetryAfter(retryAfter)
}
