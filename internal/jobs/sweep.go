package jobs

import (
	"context"
	"time"
)

// Reaper defaults: how many rows one retention statement takes and how
// long the sweep waits between two statements. At these a sweep of 100 000
// due rows is 200 statements, each short enough that the locks it holds
// (the rows it changes, one queue-count shard per pool) are released
// before a submission that meets them waits long; the pause leaves the
// database to the traffic between them.
const (
	DefaultReapBatch = 500
	DefaultReapPause = 100 * time.Millisecond
)

// SweepConfig bounds one retention sweep's work.
type SweepConfig struct {
	// Batch is the most rows one statement handles; <= 0 means
	// DefaultReapBatch.
	Batch int
	// Pause is the wait between two statements of one sweep; < 0 means none,
	// 0 means DefaultReapPause.
	Pause time.Duration
}

// batch and pause are the configuration with defaults applied.
func (c SweepConfig) batch() int {
	if c.Batch <= 0 {
		return DefaultReapBatch
	}
	return c.Batch
}

func (c SweepConfig) pause() time.Duration {
	switch {
	case c.Pause < 0:
		return 0
	case c.Pause == 0:
		return DefaultReapPause
	}
	return c.Pause
}

// Drain runs step with the batch size until a step handles fewer rows than
// that (nothing more is due), fails, or ctx ends, pausing between steps. It
// returns the rows handled in all and the first error.
func (c SweepConfig) Drain(ctx context.Context, step func(ctx context.Context, limit int) (int, error)) (int, error) {
	batch, pause := c.batch(), c.pause()
	total := 0
	for {
		n, err := step(ctx, batch)
		total += n
		if err != nil || n < batch {
			return total, err
		}
		if pause > 0 {
			t := time.NewTimer(pause)
			select {
			case <-ctx.Done():
				t.Stop()
				return total, ctx.Err()
			case <-t.C:
			}
		} else if ctx.Err() != nil {
			return total, ctx.Err()
		}
	}
}
