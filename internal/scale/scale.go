// Package scale computes a pool's scale signal: how many workers it
// needs, from what the gateways sharing a database agree on — the queue,
// the running jobs, the demand refused for want of a worker — so that an
// autoscaler (KEDA, an HPA on Prometheus, a script) reading any gateway
// reads the same figure.
//
//	jobs    = queued + running
//	needed  = min(ceil(jobs / per_worker),
//	              ceil(jobs × mean job time / per_worker / target))
//	          at least 1 while demand is unmet or was refused within the
//	          scale-down delay (a pool at zero whose callers got 429)
//	clamped to [min_workers, max_workers]
//	desired = max(needed, the hold)
//
// The second term sizes the pool by the work queued rather than by the
// number of jobs: the workers that drain it within target (the pool's
// target_queue_time, by default its measured cold start: a worker is
// asked for only when it has at least a cold start's worth of work). It
// applies once the pool's mean job time is known from MinJobSamples
// recent jobs; before, one worker per per_worker jobs.
//
// The hold is the highest needed count, kept for the scale-down delay
// after it was last reached and while jobs wait in the queue, so that the
// workers of a burst are not taken away between two bursts nor while its
// queue drains; scaling up is never delayed.
package scale

import (
	"math"
	"time"
)

// MinJobSamples is how many recent succeeded jobs the mean job time must
// come from before the signal sizes the pool by work.
const MinJobSamples = 10

// Config is a pool's scale bounds.
type Config struct {
	// MinWorkers and MaxWorkers bound the signal; MaxWorkers 0 is
	// unbounded.
	MinWorkers, MaxWorkers int
	// PerWorker is how many jobs one worker runs at once (its concurrency).
	// Values below 1 count as 1.
	PerWorker int
	// ScaleDownDelay is how long the signal holds a count after the need
	// for it was last seen.
	ScaleDownDelay time.Duration
	// TargetQueueTime is the time the queued and running work should take
	// on the desired workers; 0: the measured cold start (and one worker
	// per PerWorker jobs while none was measured).
	TargetQueueTime time.Duration
}

// Target is the queue time the signal sizes the pool for: the configured
// one, else the measured cold start; 0 when neither (one worker per
// PerWorker jobs).
func (c Config) Target(coldStart time.Duration) time.Duration {
	if c.TargetQueueTime > 0 {
		return c.TargetQueueTime
	}
	return max(coldStart, 0)
}

// Input is the shared state the signal is computed from.
type Input struct {
	Queued, Running int64
	// DemandAt is the last refused request; DemandSince the start of the
	// demand not met yet (zero when met).
	DemandAt, DemandSince time.Time
	// Peak and PeakAt are the stored hold.
	Peak   int
	PeakAt time.Time
	Now    time.Time
	// ColdStart is the pool's measured cold start (0: none yet).
	ColdStart time.Duration
	// JobTime is the mean run time of the pool's recent succeeded jobs,
	// over JobSamples of them.
	JobTime    time.Duration
	JobSamples int
}

// Signal is the computed figure and the hold to store.
type Signal struct {
	// Needed is the workers needed now; Desired adds the hold.
	Needed, Desired int
	// Peak and PeakAt are the hold after this computation; Store reports
	// that they differ from the input's (the caller stores them).
	Peak   int
	PeakAt time.Time
	Store  bool
}

// Compute returns the signal for in.
func Compute(c Config, in Input) Signal {
	per := int64(max(c.PerWorker, 1))
	jobs := in.Queued + in.Running
	needed := int((jobs + per - 1) / per)
	if target := c.Target(in.ColdStart); target > 0 && jobs > 0 && in.JobTime > 0 && in.JobSamples >= MinJobSamples {
		work := float64(jobs) * in.JobTime.Seconds() / float64(per)
		// The epsilon keeps an exact quotient (100 s / 5 s) from rounding
		// up on float error.
		byWork := max(int(math.Ceil(work/target.Seconds()-1e-9)), 1)
		needed = min(needed, byWork)
	}
	demand := !in.DemandSince.IsZero() || (!in.DemandAt.IsZero() && in.Now.Sub(in.DemandAt) < c.ScaleDownDelay)
	if demand {
		needed = max(needed, 1)
	}
	needed = max(needed, c.MinWorkers)
	if c.MaxWorkers > 0 {
		needed = min(needed, c.MaxWorkers)
	}
	s := Signal{Needed: needed, Desired: needed, Peak: in.Peak, PeakAt: in.PeakAt}
	held := !in.PeakAt.IsZero() && in.Now.Sub(in.PeakAt) < c.ScaleDownDelay
	switch {
	case needed > 0 && needed >= in.Peak:
		s.Peak, s.PeakAt = needed, in.Now // reached (again): the hold restarts
	case held && in.Queued > 0:
		s.PeakAt = in.Now // jobs wait: the hold does not run out while the queue drains
	case !held && in.Peak != needed:
		s.Peak, s.PeakAt = needed, in.Now // the hold expired
	}
	s.Store = s.Peak != in.Peak || !s.PeakAt.Equal(in.PeakAt)
	if s.Peak > needed { // a hold in force
		s.Desired = s.Peak
		if c.MaxWorkers > 0 {
			s.Desired = min(s.Desired, c.MaxWorkers)
		}
	}
	return s
}

// RetryAfter is the Retry-After, in whole seconds, of a request refused
// for want of a worker: what remains of the measured cold start since the
// demand began (the cold start itself when it is not known to have begun),
// or fallback when none was measured, bounded by [1s, limit].
func RetryAfter(coldStart, fallback, limit time.Duration, demandSince, now time.Time) int {
	d := fallback
	if coldStart > 0 {
		d = coldStart
		if !demandSince.IsZero() {
			d = coldStart - now.Sub(demandSince)
		}
	}
	if limit > 0 {
		d = min(d, limit)
	}
	secs := int((d + time.Second - 1) / time.Second)
	return max(secs, 1)
}
