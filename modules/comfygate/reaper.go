package comfygate

import (
	"fmt"
	"strconv"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/jobs"
)

// ReaperConfig bounds the retention sweeps: expiring jobs past their
// deadline or running bound, deleting job records past purge_after, and
// deleting expired assets with their blobs. Each sweep runs as statements
// of at most BatchSize rows with Pause between them until nothing is due,
// so a large backlog (100 000 jobs expiring at once) never becomes one long
// statement holding its locks while submissions wait.
type ReaperConfig struct {
	// BatchSize is the most rows one sweep statement handles. Default 500.
	BatchSize int `json:"batch_size,omitempty"`
	// Pause is the wait between two statements of one sweep. Default 100ms.
	Pause caddy.Duration `json:"pause,omitempty"`
}

func (c *ReaperConfig) applyDefaults() {
	if c.BatchSize == 0 {
		c.BatchSize = jobs.DefaultReapBatch
	}
	if c.Pause == 0 {
		c.Pause = caddy.Duration(jobs.DefaultReapPause)
	}
}

func (c *ReaperConfig) validate() error {
	if c.BatchSize < 1 || c.Pause < 0 {
		return fmt.Errorf("comfygate: reaper batch_size must be positive and pause not negative")
	}
	return nil
}

// sweep is the configuration as the jobs package takes it (after
// applyDefaults, so a pause of 0 has become the default).
func (c *ReaperConfig) sweep() jobs.SweepConfig {
	return jobs.SweepConfig{Batch: c.BatchSize, Pause: time.Duration(c.Pause)}
}

// unmarshalCaddyfile reads the reaper block:
//
//	reaper {
//		batch_size <n>
//		pause <duration>
//	}
func (c *ReaperConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var v string
		if !d.AllArgs(&v) {
			return d.ArgErr()
		}
		var err error
		switch name {
		case "batch_size":
			c.BatchSize, err = strconv.Atoi(v)
		case "pause":
			err = ParseDuration(v, &c.Pause)
		default:
			return d.Errf("unknown reaper option %q", name)
		}
		if err != nil {
			return d.Errf("reaper %s: %v", name, err)
		}
	}
	return nil
}
