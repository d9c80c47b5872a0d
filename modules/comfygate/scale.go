package comfygate

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/workflow"

	"github.com/comfygate/comfygate/internal/scale"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
)

// running is the app of the running configuration, for the admin API.
var running atomic.Pointer[App]

// Running returns the app of the running configuration, nil before one
// started.
func Running() *App { return running.Load() }

// scaleConfig is p's scale bounds with the defaults applied.
func scaleConfig(p *PoolConfig) scale.Config {
	c := scale.Config{PerWorker: 1, ScaleDownDelay: DefaultScaleDownDelay}
	if s := p.Scale; s != nil {
		c.MinWorkers, c.MaxWorkers = s.MinWorkers, s.MaxWorkers
		if s.WorkerConcurrency > 0 {
			c.PerWorker = s.WorkerConcurrency
		}
		if s.ScaleDownDelay > 0 {
			c.ScaleDownDelay = time.Duration(s.ScaleDownDelay)
		}
		c.TargetQueueTime = time.Duration(s.TargetQueueTime)
	}
	return c
}

// scaleStore is the store's scale state, or an error when the backend
// keeps none.
func (a *App) scaleStore() (storage.ScaleStore, error) {
	if err := a.Ready(); err != nil {
		return nil, err
	}
	st, ok := a.res.store.(storage.ScaleStore)
	if !ok {
		return nil, errors.New("comfygate: the storage backend keeps no scale state")
	}
	return st, nil
}

// ScaleReports computes the scale signal of every comfyui pool from the
// database (the same on every gateway sharing it).
func (a *App) ScaleReports(ctx context.Context) ([]scale.Report, error) {
	st, err := a.scaleStore()
	if err != nil {
		return nil, err
	}
	counts, err := a.res.store.CountJobs(ctx)
	if err != nil {
		return nil, err
	}
	pools := map[string]scale.Config{}
	for _, p := range a.Pools {
		if p.Kind == KindComfyUI {
			pools[p.Name] = scaleConfig(p)
		}
	}
	return scale.Reports(ctx, st, counts, pools, time.Now())
}

// RecordDemand notes that a request to pool found no worker to take it
// (it counts in the pool's scale signal) and returns the Retry-After to
// answer, in seconds: what remains of the pool's measured cold start,
// bounded by its retry_after_max, or fallback before one was measured.
func (a *App) RecordDemand(ctx context.Context, pool string, fallback time.Duration) int {
	limit := DefaultRetryAfterMax
	for _, p := range a.Pools {
		if p.Name == pool && p.Scale != nil && p.Scale.RetryAfterMax > 0 {
			limit = time.Duration(p.Scale.RetryAfterMax)
		}
	}
	now := time.Now()
	st, err := a.scaleStore()
	if err == nil {
		err = st.RecordDemand(ctx, pool, now)
	}
	var ps storage.PoolScale
	if err == nil {
		var all map[string]storage.PoolScale
		all, err = st.PoolScales(ctx)
		ps = all[pool]
	}
	if err != nil {
		a.logger.Warn("recording a pool's demand", zap.String("pool", pool), zap.Error(err))
	}
	return scale.RetryAfter(ps.ColdStart, fallback, limit, ps.DemandSince, now)
}

// noCatalogRetryAfter is the Retry-After of a submission to a pool that
// never had a worker, before a cold start was measured.
const noCatalogRetryAfter = 5 * time.Second

// poolCatalog is pool's catalog; for a comfyui pool that cannot validate
// (no worker ever answered: a pool at zero since the gateway started) the
// 503 counts as demand in the scale signal, and its Retry-After is the
// pool's measured cold start.
func (a *App) poolCatalog(pool string) func(context.Context) (workflow.Catalog, error) {
	pe := a.executors[pool]
	if pe.kind != KindComfyUI {
		return pe.exec.Catalog
	}
	return func(ctx context.Context) (workflow.Catalog, error) {
		cat, err := pe.exec.Catalog(ctx)
		if e, ok := apierr.As(err); ok && e.Status == http.StatusServiceUnavailable {
			return nil, e.WithRetryAfter(a.RecordDemand(ctx, pool, noCatalogRetryAfter))
		}
		return cat, err
	}
}

// wakeDispatcher tells pool's dispatchers that a worker became healthy:
// its slots are claimable now, not at the next poll.
func (a *App) wakeDispatcher(pool string) {
	if !a.res.opened.Load() {
		return
	}
	_ = a.res.bus.Publish(context.Background(), bus.Event{Kind: "queued", Pool: pool})
}

// demandMet records that a worker of pool became healthy: the end of a
// cold start if demand was waiting.
func (a *App) demandMet(pool string) {
	st, err := a.scaleStore()
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = st.DemandMet(ctx, pool, time.Now())
		cancel()
	}
	if err != nil {
		a.logger.Warn("recording a pool's cold start", zap.String("pool", pool), zap.Error(err))
	}
}
