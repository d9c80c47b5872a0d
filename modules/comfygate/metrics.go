package comfygate

import (
	"context"
	"errors"

	"github.com/caddyserver/caddy/v2"

	"github.com/comfygate/comfygate/internal/metrics"
)

// registerMetrics adds comfygate's series to this configuration's
// registry (Caddy's: its admin endpoint's /metrics and the metrics
// handler serve it). The counters are the process's and run on across
// reloads; the queue and worker gauges are read when scraped.
func (a *App) registerMetrics(ctx caddy.Context) error {
	reg := ctx.GetMetricsRegistry()
	if reg == nil {
		return nil
	}
	return metrics.Register(reg, &metrics.State{Jobs: a.jobCounts, Workers: a.workerCounts, Scale: a.scaleSeries})
}

// jobCounts reads every pool's queued and running jobs from storage.
func (a *App) jobCounts(ctx context.Context) (map[string]metrics.PoolJobs, error) {
	if !a.res.opened.Load() {
		return nil, errors.New("storage is not open")
	}
	counts, err := a.res.store.CountJobs(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]metrics.PoolJobs, len(a.executors))
	for name := range a.executors {
		c := counts[name]
		out[name] = metrics.PoolJobs{Queued: c.Queued, Running: c.Running}
	}
	return out, nil
}

// workerCounts counts each pool's workers by health. A builtin pool is one
// worker, this process, always healthy.
func (a *App) workerCounts() []metrics.WorkerCount {
	var out []metrics.WorkerCount
	for _, p := range a.PoolStates() {
		if p.Kind == KindBuiltin {
			out = append(out, metrics.WorkerCount{Pool: p.Name, Health: "healthy", N: 1})
			continue
		}
		healthy, draining := 0, 0
		for _, w := range p.Workers {
			switch {
			case w.Draining:
				draining++
			case w.Healthy:
				healthy++
			}
		}
		out = append(out, metrics.WorkerCount{Pool: p.Name, Health: "healthy", N: healthy},
			metrics.WorkerCount{Pool: p.Name, Health: "unhealthy", N: len(p.Workers) - healthy - draining},
			metrics.WorkerCount{Pool: p.Name, Health: "draining", N: draining})
	}
	return out
}

// scaleSeries is the scale signal of every comfyui pool, for the series.
func (a *App) scaleSeries(ctx context.Context) ([]metrics.PoolScale, error) {
	if !a.res.opened.Load() {
		return nil, errors.New("storage is not open")
	}
	reports, err := a.ScaleReports(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]metrics.PoolScale, len(reports))
	for i, r := range reports {
		out[i] = metrics.PoolScale{Pool: r.Pool, Desired: r.DesiredWorkers, Needed: r.NeededWorkers, Min: r.MinWorkers,
			Max: r.MaxWorkers, DemandUnmet: r.DemandUnmet, ColdStartSeconds: r.ColdStartSeconds}
	}
	return out, nil
}
