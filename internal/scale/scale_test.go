package scale

import (
	"testing"
	"time"
)

func TestCompute(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := Config{MaxWorkers: 10, PerWorker: 2, ScaleDownDelay: time.Minute}
	work := func(target time.Duration, per, maxWorkers int) Config {
		return Config{MaxWorkers: maxWorkers, PerWorker: per, ScaleDownDelay: time.Minute, TargetQueueTime: target}
	}
	half := 500 * time.Millisecond
	for _, c := range []struct {
		name         string
		cfg          Config
		in           Input
		needed, want int
		peak         int
		peakAt       time.Time
		store        bool
	}{
		{name: "idle at zero", cfg: cfg, in: Input{Now: t0}, needed: 0, want: 0},
		{name: "queue rounds up per worker", cfg: cfg, in: Input{Queued: 3, Running: 2, Now: t0},
			needed: 3, want: 3, peak: 3, peakAt: t0, store: true},
		{name: "bounded by max", cfg: cfg, in: Input{Queued: 200, Now: t0}, needed: 10, want: 10, peak: 10, peakAt: t0, store: true},
		{name: "min workers when idle", cfg: Config{MinWorkers: 2, PerWorker: 1, ScaleDownDelay: time.Minute}, in: Input{Now: t0},
			needed: 2, want: 2, peak: 2, peakAt: t0, store: true},
		{name: "unmet demand at zero asks one", cfg: cfg, in: Input{DemandAt: t0, DemandSince: t0, Now: t0.Add(time.Hour)},
			needed: 1, want: 1, peak: 1, peakAt: t0.Add(time.Hour), store: true},
		{name: "recent demand keeps one", cfg: cfg, in: Input{DemandAt: t0, Now: t0.Add(30 * time.Second)},
			needed: 1, want: 1, peak: 1, peakAt: t0.Add(30 * time.Second), store: true},
		{name: "old demand met is no demand", cfg: cfg, in: Input{DemandAt: t0, Now: t0.Add(2 * time.Minute)}, needed: 0, want: 0},
		{name: "hold between bursts", cfg: cfg, in: Input{Running: 1, Peak: 8, PeakAt: t0, Now: t0.Add(59 * time.Second)},
			needed: 1, want: 8, peak: 8, peakAt: t0},
		{name: "hold kept while jobs wait", cfg: cfg, in: Input{Queued: 1, Peak: 8, PeakAt: t0, Now: t0.Add(59 * time.Second)},
			needed: 1, want: 8, peak: 8, peakAt: t0.Add(59 * time.Second), store: true},
		{name: "hold expired: down to need", cfg: cfg, in: Input{Queued: 1, Peak: 8, PeakAt: t0, Now: t0.Add(time.Minute)},
			needed: 1, want: 1, peak: 1, peakAt: t0.Add(time.Minute), store: true},
		{name: "hold expired: down to zero", cfg: cfg, in: Input{Peak: 8, PeakAt: t0, Now: t0.Add(2 * time.Minute)},
			needed: 0, want: 0, peak: 0, peakAt: t0.Add(2 * time.Minute), store: true},
		{name: "zero hold stays stored", cfg: cfg, in: Input{Peak: 0, PeakAt: t0, Now: t0.Add(2 * time.Minute)},
			needed: 0, want: 0, peak: 0, peakAt: t0},
		{name: "scale up is never held", cfg: cfg, in: Input{Queued: 12, Peak: 2, PeakAt: t0, Now: t0.Add(time.Second)},
			needed: 6, want: 6, peak: 6, peakAt: t0.Add(time.Second), store: true},
		{name: "need at the hold restarts it", cfg: cfg, in: Input{Running: 4, Peak: 2, PeakAt: t0, Now: t0.Add(50 * time.Second)},
			needed: 2, want: 2, peak: 2, peakAt: t0.Add(50 * time.Second), store: true},
		{name: "lowered max bounds a hold", cfg: Config{MaxWorkers: 3, PerWorker: 1, ScaleDownDelay: time.Minute},
			in: Input{Peak: 8, PeakAt: t0, Now: t0.Add(time.Second)}, needed: 0, want: 3, peak: 8, peakAt: t0},
		{name: "per worker below one counts one", cfg: Config{ScaleDownDelay: time.Minute}, in: Input{Queued: 3, Now: t0},
			needed: 3, want: 3, peak: 3, peakAt: t0, store: true},

		// Sized by work (target_queue_time; a 0.5 s job, known from enough
		// samples).
		{name: "work: the workers that drain it within the target", cfg: work(7*time.Second, 1, 20),
			in: Input{Queued: 200, JobTime: half, JobSamples: 200, Now: t0}, needed: 15, want: 15, peak: 15, peakAt: t0, store: true},
		{name: "work: an exact quotient is not rounded up", cfg: work(5*time.Second, 1, 0),
			in: Input{Queued: 60, Running: 40, JobTime: half, JobSamples: 10, Now: t0}, needed: 10, want: 10, peak: 10, peakAt: t0, store: true},
		{name: "work: per worker concurrency", cfg: work(5*time.Second, 2, 0),
			in: Input{Queued: 40, JobTime: time.Second, JobSamples: 50, Now: t0}, needed: 4, want: 4, peak: 4, peakAt: t0, store: true},
		{name: "work: long jobs, at most one worker per job", cfg: work(5*time.Second, 1, 0),
			in: Input{Queued: 3, JobTime: time.Minute, JobSamples: 50, Now: t0}, needed: 3, want: 3, peak: 3, peakAt: t0, store: true},
		{name: "work: a little work asks one", cfg: work(5*time.Second, 1, 0),
			in: Input{Queued: 1, JobTime: 10 * time.Millisecond, JobSamples: 50, Now: t0}, needed: 1, want: 1, peak: 1, peakAt: t0, store: true},
		{name: "work: too few samples, one per job", cfg: work(5*time.Second, 1, 0),
			in: Input{Queued: 30, JobTime: half, JobSamples: MinJobSamples - 1, Now: t0}, needed: 30, want: 30, peak: 30, peakAt: t0, store: true},
		{name: "work: no job time, one per job", cfg: work(5*time.Second, 1, 0),
			in: Input{Queued: 30, Now: t0}, needed: 30, want: 30, peak: 30, peakAt: t0, store: true},
		{name: "work: default target, the cold start", cfg: work(0, 1, 0),
			in: Input{Queued: 30, JobTime: half, JobSamples: 50, ColdStart: 3 * time.Second, Now: t0}, needed: 5, want: 5, peak: 5, peakAt: t0, store: true},
		{name: "work: no target and no cold start, one per job", cfg: work(0, 1, 0),
			in: Input{Queued: 30, JobTime: half, JobSamples: 50, Now: t0}, needed: 30, want: 30, peak: 30, peakAt: t0, store: true},
		{name: "work: bounded by min", cfg: Config{MinWorkers: 4, TargetQueueTime: time.Minute, PerWorker: 1, ScaleDownDelay: time.Minute},
			in: Input{Queued: 30, JobTime: half, JobSamples: 50, Now: t0}, needed: 4, want: 4, peak: 4, peakAt: t0, store: true},
		{name: "work: the queue drains under the hold", cfg: work(7*time.Second, 1, 20),
			in:     Input{Queued: 60, Running: 15, JobTime: half, JobSamples: 200, Peak: 15, PeakAt: t0, Now: t0.Add(4 * time.Second)},
			needed: 6, want: 15, peak: 15, peakAt: t0.Add(4 * time.Second), store: true},
		{name: "work: queue drained, the hold runs out", cfg: work(7*time.Second, 1, 20),
			in:     Input{Running: 15, JobTime: half, JobSamples: 200, Peak: 15, PeakAt: t0, Now: t0.Add(time.Hour)},
			needed: 2, want: 2, peak: 2, peakAt: t0.Add(time.Hour), store: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := Compute(c.cfg, c.in)
			if s.Needed != c.needed || s.Desired != c.want || s.Peak != c.peak || !s.PeakAt.Equal(c.peakAt) || s.Store != c.store {
				t.Errorf("got needed %d desired %d hold %d@%v store %v; want %d %d %d@%v %v",
					s.Needed, s.Desired, s.Peak, s.PeakAt, s.Store, c.needed, c.want, c.peak, c.peakAt, c.store)
			}
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name                  string
		cold, fallback, limit time.Duration
		since, now            time.Time
		want                  int
	}{
		{"unmeasured: the fallback", 0, 5 * time.Second, time.Minute, t0, t0, 5},
		{"measured, demand just began", 12 * time.Second, 5 * time.Second, time.Minute, t0, t0, 12},
		{"what remains of it", 12 * time.Second, 5 * time.Second, time.Minute, t0, t0.Add(4500 * time.Millisecond), 8},
		{"overdue: one second", 12 * time.Second, 5 * time.Second, time.Minute, t0, t0.Add(time.Minute), 1},
		{"bounded by the limit", 10 * time.Minute, 5 * time.Second, time.Minute, t0, t0, 60},
		{"no demand start: the whole cold start", 7 * time.Second, 5 * time.Second, time.Minute, time.Time{}, t0, 7},
	} {
		if got := RetryAfter(c.cold, c.fallback, c.limit, c.since, c.now); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}
