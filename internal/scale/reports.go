package scale

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// Report is one pool's scale signal as the admin API serves it, in the
// shape KEDA's metrics-api scaler reads (valueLocation: desiredWorkers).
// Every figure comes from the database, so every gateway sharing it
// answers the same.
type Report struct {
	Pool string `json:"pool"`
	// DesiredWorkers is the signal: the workers the pool should have.
	DesiredWorkers int `json:"desiredWorkers"`
	// NeededWorkers is the need now, without the scale-down hold.
	NeededWorkers int   `json:"neededWorkers"`
	QueuedJobs    int64 `json:"queuedJobs"`
	RunningJobs   int64 `json:"runningJobs"`
	MinWorkers    int   `json:"minWorkers"`
	MaxWorkers    int   `json:"maxWorkers"`
	// DemandUnmet: a request found no worker and none became healthy
	// since.
	DemandUnmet bool `json:"demandUnmet"`
	// ColdStartSeconds is the last measured cold start (0: none yet).
	ColdStartSeconds float64 `json:"coldStartSeconds"`
	// MeanJobSeconds is the mean run time of the pool's recent succeeded
	// jobs, over JobSamples of them.
	MeanJobSeconds float64 `json:"meanJobSeconds"`
	JobSamples     int     `json:"jobSamples"`
	// TargetQueueSeconds is the queue time the pool is sized for (its
	// target_queue_time, else its cold start); 0: one worker per
	// worker_concurrency jobs.
	TargetQueueSeconds float64 `json:"targetQueueSeconds"`
}

// RecentJobs is how many of the newest jobs the mean job time is read
// from (their succeeded ones, per pool).
const RecentJobs = 500

// casTries bounds the compare-and-set rounds of one computation: another
// gateway storing the hold at the same moment makes this one re-read.
const casTries = 4

// Reports computes the signal of each pool in pools from the queue counts,
// the pool's recent job times and the stored scale state, storing the hold
// when it changes. Reports are sorted by pool.
func Reports(ctx context.Context, st storage.ScaleStore, counts map[string]storage.PoolCounts,
	pools map[string]Config, now time.Time) ([]Report, error) {
	states, err := st.PoolScales(ctx)
	if err != nil {
		return nil, err
	}
	times, err := st.JobTimes(ctx, RecentJobs)
	if err != nil {
		return nil, err
	}
	out := make([]Report, 0, len(pools))
	for name, cfg := range pools {
		c, jt := counts[name], times[name]
		var sig Signal
		for try := 0; ; try++ {
			ps := states[name]
			sig = Compute(cfg, Input{Queued: c.Queued, Running: c.Running, DemandAt: ps.DemandAt,
				DemandSince: ps.DemandSince, Peak: ps.Peak, PeakAt: ps.PeakAt, Now: now,
				ColdStart: ps.ColdStart, JobTime: jt.Mean, JobSamples: jt.Samples})
			if !sig.Store {
				break
			}
			ok, err := st.SetPeak(ctx, name, ps, sig.Peak, sig.PeakAt)
			if err != nil {
				return nil, err
			}
			if ok || try == casTries-1 {
				break
			}
			if states, err = st.PoolScales(ctx); err != nil {
				return nil, err
			}
		}
		ps := states[name]
		out = append(out, Report{Pool: name, DesiredWorkers: sig.Desired, NeededWorkers: sig.Needed,
			QueuedJobs: c.Queued, RunningJobs: c.Running, MinWorkers: cfg.MinWorkers, MaxWorkers: cfg.MaxWorkers,
			DemandUnmet: !ps.DemandSince.IsZero(), ColdStartSeconds: ps.ColdStart.Seconds(),
			MeanJobSeconds: jt.Mean.Seconds(), JobSamples: jt.Samples, TargetQueueSeconds: cfg.Target(ps.ColdStart).Seconds()})
	}
	slices.SortFunc(out, func(a, b Report) int { return strings.Compare(a.Pool, b.Pool) })
	return out, nil
}
