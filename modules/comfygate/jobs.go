package comfygate

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/streamlimit"
	"github.com/comfygate/comfygate/internal/workflow"
)

// JobsConfig configures job submission and execution.
type JobsConfig struct {
	// Concurrency is how many jobs the built-in pool runs at once in this
	// process. Default 2.
	Concurrency int `json:"concurrency,omitempty"`
	// MaxQueued bounds the queue; over it submissions get 429 queue_full.
	// Default 1000.
	MaxQueued int `json:"max_queued,omitempty"`
	// Retention is how long a job and its outputs are kept. Default 24h.
	Retention caddy.Duration `json:"retention,omitempty"`
	// RunningBound expires a job that runs longer than this. Default 2h.
	RunningBound caddy.Duration `json:"running_bound,omitempty"`
	// Lease is how long a claimed job survives without a heartbeat: the time
	// after which a job of a dead process is reclaimed. Default 30s.
	Lease caddy.Duration `json:"lease,omitempty"`
	// MaxAttempts is how many times a job is tried before it fails with
	// worker_lost. Default 3.
	MaxAttempts int `json:"max_attempts,omitempty"`
	// MaxStreams bounds the long-lived connections one account may hold
	// open in this process: the v2 API's event streams and the ComfyUI
	// front's /ws sockets together, on every site of the configuration.
	// Default 16.
	MaxStreams int `json:"max_streams,omitempty"`
	// DefaultPool is the pool comfy_jobs submits to when it names none.
	// Default "builtin".
	DefaultPool string `json:"default_pool,omitempty"`
	// NoExecute makes this process serve the API only: it queues, streams
	// and cancels jobs but runs none (other processes on the same storage do).
	NoExecute bool `json:"no_execute,omitempty"`
	// PurgeAfter is how long a finished job's record (with its run log)
	// stays after its retention deadline before it is deleted; its outputs
	// follow the job's retention. Default 24h.
	PurgeAfter caddy.Duration `json:"purge_after,omitempty"`
	// AccountMaxQueued and AccountMaxRunning are every pool's per-account
	// bounds unless the pool sets its own (see PoolConfig). Default 0:
	// unbounded. Whatever they are, a pool's queue is served round-robin
	// across the accounts with queued work.
	AccountMaxQueued  int `json:"account_max_queued,omitempty"`
	AccountMaxRunning int `json:"account_max_running,omitempty"`
}

func (c *JobsConfig) applyDefaults() {
	if c.Concurrency == 0 {
		c.Concurrency = 2
	}
	if c.MaxQueued == 0 {
		c.MaxQueued = 1000
	}
	if c.Retention == 0 {
		c.Retention = caddy.Duration(24 * time.Hour)
	}
	if c.RunningBound == 0 {
		c.RunningBound = caddy.Duration(2 * time.Hour)
	}
	if c.Lease == 0 {
		c.Lease = caddy.Duration(30 * time.Second)
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 16
	}
	if c.PurgeAfter == 0 {
		c.PurgeAfter = caddy.Duration(24 * time.Hour)
	}
}

func (c *JobsConfig) validate() error {
	switch {
	case c.Concurrency < 1, c.MaxQueued < 1, c.MaxAttempts < 1, c.MaxStreams < 1:
		return fmt.Errorf("comfygate: jobs concurrency, max_queued, max_attempts and max_streams must be positive")
	case c.Lease < caddy.Duration(time.Second):
		return fmt.Errorf("comfygate: jobs lease must be at least 1s")
	case c.Retention <= 0, c.RunningBound <= 0, c.PurgeAfter <= 0:
		return fmt.Errorf("comfygate: jobs retention, running_bound and purge_after must be positive")
	case c.AccountMaxQueued < 0, c.AccountMaxRunning < 0:
		return fmt.Errorf("comfygate: jobs account_max_queued and account_max_running must not be negative")
	}
	return nil
}

// DefaultPool is the pool comfy_jobs submits to when it names none.
func (a *App) DefaultPool() string {
	if a.JobsConfig.DefaultPool != "" {
		return a.JobsConfig.DefaultPool
	}
	return BuiltinPool
}

// Jobs returns the jobs service of a pool (which must exist; see HasPool).
// Valid after Ready.
func (a *App) Jobs(pool string) *jobs.Service {
	var precheck func(context.Context, workflow.Graph) error
	if b, ok := a.executors[pool].exec.(*jobs.BuiltinExecutor); ok {
		precheck = b.Precheck
	}
	return &jobs.Service{
		Store:     a.res.store,
		Blobs:     a.res.blobs,
		Bus:       a.res.bus,
		Catalog:   a.poolCatalog(pool),
		Precheck:  precheck,
		ExtraData: a.res.extraData,
		Config: jobs.Config{
			Pool:             pool,
			MaxQueued:        a.JobsConfig.MaxQueued,
			AccountMaxQueued: a.executors[pool].accountMaxQueued,
			Price:            a.executors[pool].price,
			Retention:        time.Duration(a.JobsConfig.Retention),
			Limits:           workflow.DefaultLimits(),
		},
	}
}

// Streams counts every account's open event streams and ComfyUI sockets
// against max_streams; comfy_jobs and comfy_native share it.
func (a *App) Streams() *streamlimit.Limiter { return a.streams }

// Stopping is closed when this configuration starts to stop, so that
// long-lived responses (event streams) end instead of holding up a reload.
func (a *App) Stopping() <-chan struct{} { return a.stopping }

// startDispatcher runs a pool's dispatcher until ctx ends.
func (a *App) startDispatcher(ctx context.Context, pool string, pe poolExecutor) <-chan struct{} {
	done := make(chan struct{})
	host, _ := os.Hostname()
	d := &jobs.Dispatcher{
		Store:     a.res.store,
		Blobs:     a.res.blobs,
		Bus:       a.res.bus,
		Exec:      pe.exec,
		ExtraData: a.res.extraData,
		Config: jobs.DispatcherConfig{
			Pool:              pool,
			Concurrency:       dispatcherConcurrency(pe),
			Lease:             time.Duration(a.JobsConfig.Lease),
			MaxAttempts:       a.JobsConfig.MaxAttempts,
			AccountMaxRunning: pe.accountMaxRunning,
			RunningBound:      time.Duration(a.JobsConfig.RunningBound),
			PollInterval:      time.Second,
			PurgeAfter:        time.Duration(a.JobsConfig.PurgeAfter),
			Sweep:             a.Reaper.sweep(),
		},
		Slots:      pe.slots,
		Owner:      fmt.Sprintf("%s/%d/%s", host, os.Getpid(), uuid.NewString()[:8]),
		RunContext: a.runCtx,
		Logger:     a.logger.Named("dispatcher").With(zap.String("pool", pool)),
	}
	go func() {
		defer close(done)
		d.Run(ctx)
	}()
	return done
}

// maxDynamicSlots is how many attempts at most a comfyui pool, whose
// workers come and go, runs at once in this process.
const maxDynamicSlots = 512

// dispatcherConcurrency is how many attempts a pool's dispatcher may run:
// its capacity, or for a comfyui pool (whose capacity follows its workers
// through Slots) the larger of that and maxDynamicSlots.
func dispatcherConcurrency(pe poolExecutor) int {
	if pe.slots != nil {
		return max(pe.capacity, maxDynamicSlots)
	}
	return pe.capacity
}
