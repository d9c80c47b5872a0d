package calls

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
)

// Credits is the credit ledger calls draw from when the router requires
// credits (storage.CreditStore's call methods): the same per-account
// ledger jobs draw from. A call's workspace is its account. A call reserves
// its price when it is admitted and settles what the partner billed when
// it ends, by its request id, exactly once; a reservation whose gateway
// died is settled by the sweep from the call's record.
type Credits interface {
	ReserveCallCredits(ctx context.Context, accountID, callID string, amount int64) error
	SettleCallCredits(ctx context.Context, callID string, charged int64) (bool, error)
	SettleStaleCallCredits(ctx context.Context, before time.Time) (int, error)
}

// staleCreditsAfter is how old an open call reservation must be before the
// sweep settles it: longer than any call is followed (its deadline, the
// collect window and a takeover), so only a call whose gateway died is
// swept. The sweep charges what the call's record says it charged, or
// refunds a call that never finished.
func (s *Service) staleCreditsAfter() time.Duration {
	return s.cfg.CollectWindow + 2*s.cfg.TakeoverAfter + time.Hour
}

// reserveCredits reserves the call's price from the workspace's credits. A
// nil error means the call may go on (also when credits are off or the
// call is free). It runs detached from the client, bounded, so that a
// reservation is never left behind by a caller that hung up.
func (s *Service) reserveCredits(ctx context.Context, req Request) *apierr.Error {
	if s.cfg.Credits == nil || req.Model.PriceCents <= 0 {
		return nil
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	err := s.cfg.Credits.ReserveCallCredits(dctx, req.Workspace, req.RequestID, req.Model.PriceCents)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrInsufficientCredits):
		return routerErr(http.StatusPaymentRequired, BucketInsufficient, "insufficient credits for this call").WithCause(err)
	}
	return routerErr(http.StatusServiceUnavailable, BucketServiceUnavailable,
		"credits cannot be checked right now; retry with backoff").WithCause(err)
}

// settleCredits settles the call's reservation for charged (0 refunds).
// A call without one (credits off, a free call, or settled already) is a
// no-op. A failure is retried and then left to the sweep.
func (s *Service) settleCredits(ctx context.Context, callID string, charged int64) {
	if s.cfg.Credits == nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	var err error
	for range 3 {
		if _, err = s.cfg.Credits.SettleCallCredits(dctx, callID, charged); err == nil {
			return
		}
	}
	s.log.Warn("router: settling a call's credits failed; the sweep settles it from the call's record",
		zap.String("request_id", callID), zap.Int64("charged", charged), zap.Error(err))
}

// sweepCredits settles the reservations of calls whose gateway died.
func (s *Service) sweepCredits(ctx context.Context) {
	if s.cfg.Credits == nil {
		return
	}
	n, err := s.cfg.Credits.SettleStaleCallCredits(ctx, time.Now().Add(-s.staleCreditsAfter()))
	if err != nil && ctx.Err() == nil {
		s.log.Warn("router: settling stale call credits failed", zap.Error(err))
	} else if n > 0 {
		s.log.Info("router: settled the credits of calls whose gateway stopped", zap.Int("count", n))
	}
}
