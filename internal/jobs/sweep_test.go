package jobs

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSweepDrain(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name      string
		cfg       SweepConfig
		due       int
		failAt    int // step number that fails (0: none)
		wantTotal int
		wantSteps int
		wantLimit int
		wantErr   error
	}{
		{"nothing due: one step", SweepConfig{Batch: 10, Pause: -1}, 0, 0, 0, 1, 10, nil},
		{"less than a batch", SweepConfig{Batch: 10, Pause: -1}, 7, 0, 7, 1, 10, nil},
		{"exact batches end with an empty step", SweepConfig{Batch: 10, Pause: -1}, 30, 0, 30, 4, 10, nil},
		{"partial last batch", SweepConfig{Batch: 10, Pause: time.Microsecond}, 25, 0, 25, 3, 10, nil},
		{"default batch", SweepConfig{Pause: -1}, 1200, 0, 1200, 3, DefaultReapBatch, nil},
		{"stops at an error", SweepConfig{Batch: 10, Pause: -1}, 100, 2, 10, 2, 10, boom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			left, steps := tc.due, 0
			total, err := tc.cfg.Drain(context.Background(), func(_ context.Context, limit int) (int, error) {
				steps++
				if limit != tc.wantLimit {
					t.Errorf("step %d: limit %d, want %d", steps, limit, tc.wantLimit)
				}
				if steps == tc.failAt {
					return 0, boom
				}
				n := min(limit, left)
				left -= n
				return n, nil
			})
			if total != tc.wantTotal || steps != tc.wantSteps || !errors.Is(err, tc.wantErr) {
				t.Errorf("Drain = %d, %v after %d steps; want %d, %v after %d", total, err, steps,
					tc.wantTotal, tc.wantErr, tc.wantSteps)
			}
		})
	}
}

func TestSweepDrainStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	steps := 0
	total, err := SweepConfig{Batch: 5, Pause: time.Hour}.Drain(ctx, func(context.Context, int) (int, error) {
		steps++
		cancel() // the pause that follows must end with ctx
		return 5, nil
	})
	if total != 5 || steps != 1 || !errors.Is(err, context.Canceled) {
		t.Errorf("Drain = %d, %v after %d steps; want 5, context.Canceled after 1", total, err, steps)
	}
}

func TestSweepConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		cfg   SweepConfig
		batch int
		pause time.Duration
	}{
		{SweepConfig{}, DefaultReapBatch, DefaultReapPause},
		{SweepConfig{Batch: 50, Pause: time.Second}, 50, time.Second},
		{SweepConfig{Batch: -1, Pause: -1}, DefaultReapBatch, 0},
	} {
		if b, p := tc.cfg.batch(), tc.cfg.pause(); b != tc.batch || p != tc.pause {
			t.Errorf("%+v: batch %d pause %v; want %d %v", tc.cfg, b, p, tc.batch, tc.pause)
		}
	}
}
