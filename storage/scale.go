package storage

import (
	"context"
	"time"
)

// PoolScale is a pool's scale state as the gateways sharing a database
// keep it (internal/scale computes the signal from it and the queue).
type PoolScale struct {
	// DemandAt is when a request last found the pool without a worker
	// that could take it (a serverless deployment's 429
	// deployment_not_ready); zero when never.
	DemandAt time.Time
	// DemandSince is when the demand not met yet began; zero once a worker
	// became healthy after it.
	DemandSince time.Time
	// ColdStart is the last measured cold start: from DemandSince to the
	// first healthy worker. Zero until measured.
	ColdStart time.Duration
	// Peak is the scale-down hold: the highest desired count published
	// recently, and PeakAt when it was last reached.
	Peak   int
	PeakAt time.Time
}

// ScaleStore keeps the pools' scale state. The postgres and embedded
// stores implement it; the comfygate app asserts it.
type ScaleStore interface {
	// PoolScales returns the state of every pool that has one.
	PoolScales(ctx context.Context) (map[string]PoolScale, error)
	// RecordDemand notes demand at at: DemandAt = at, and DemandSince = at
	// unless demand is already unmet.
	RecordDemand(ctx context.Context, pool string, at time.Time) error
	// DemandMet notes that a worker of the pool became healthy at at: an
	// unmet demand's cold start (at − DemandSince) is recorded and
	// DemandSince cleared. Nothing changes while no demand is unmet.
	DemandMet(ctx context.Context, pool string, at time.Time) error
	// SetPeak replaces the hold (Peak, PeakAt) by (peak, at) if it still is
	// old's (compare and set); it reports whether it did.
	SetPeak(ctx context.Context, pool string, old PoolScale, peak int, at time.Time) (bool, error)
	// JobTimes returns, per pool, the mean run time (CompletedAt −
	// StartedAt) of the succeeded jobs among the recent newest jobs
	// created (all pools' together, on the jobs_created index, so the cost
	// does not grow with the table). Pools without one are left out.
	JobTimes(ctx context.Context, recent int) (map[string]JobTimes, error)
}

// JobTimes is a pool's recent job run time: the mean over Samples
// succeeded jobs.
type JobTimes struct {
	Samples int
	Mean    time.Duration
}

// UnixMilli is t in Unix milliseconds, 0 for the zero time.
func UnixMilli(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// FromUnixMilli is the inverse of UnixMilli.
func FromUnixMilli(ms int64) time.Time {
	if ms == 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
