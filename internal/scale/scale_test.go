package scale

import (
	"testing"
	"time"
)

func TestCompute(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	cfg := Config{MaxWorkers: 10, PerWorker: 2, ScaleDownDelay: time.Minute}
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
		{name: "hold between bursts", cfg: cfg, in: Input{Queued: 1, Peak: 8, PeakAt: t0, Now: t0.Add(59 * time.Second)},
			needed: 1, want: 8, peak: 8, peakAt: t0},
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
