package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stateTimeout bounds the storage read of one scrape.
const stateTimeout = 2 * time.Second

// PoolJobs are a pool's jobs waiting and running, as storage has them.
type PoolJobs struct {
	Queued, Running int64
}

// WorkerCount is how many of a pool's workers are in one health state.
type WorkerCount struct {
	Pool, Health string
	N            int
}

// State reports, at scrape time, figures that belong to the shared state
// rather than to this process: the queue depth and running jobs of each
// pool, read from storage (so every gateway on one database reports the
// same), and the workers of this process's pools by health.
type State struct {
	// Jobs reads the per-pool counts from storage.
	Jobs func(ctx context.Context) (map[string]PoolJobs, error)
	// Workers lists the pools' workers by health.
	Workers func() []WorkerCount
	// Scale computes the pools' scale signals from storage.
	Scale func(ctx context.Context) ([]PoolScale, error)
}

// PoolScale is a pool's scale signal (see internal/scale).
type PoolScale struct {
	Pool             string
	Desired, Needed  int
	Min, Max         int
	DemandUnmet      bool
	ColdStartSeconds float64
}

var (
	queuedDesc = prometheus.NewDesc(namespace+"_jobs_queued",
		"Jobs waiting in a pool's queue, from storage (the same on every gateway of one database).", []string{"pool"}, nil)
	runningDesc = prometheus.NewDesc(namespace+"_jobs_running",
		"Jobs running (or canceling) on a pool, from storage.", []string{"pool"}, nil)
	workersDesc = prometheus.NewDesc(namespace+"_pool_workers",
		"Workers of a pool known to this gateway, by health (healthy, unhealthy, draining).", []string{"pool", "health"}, nil)
	desiredDesc = prometheus.NewDesc(namespace+"_pool_desired_workers",
		"Workers a pool should have (the scale signal, scale-down delay included), from storage: the same on every gateway of one database.", []string{"pool"}, nil)
	neededDesc = prometheus.NewDesc(namespace+"_pool_needed_workers",
		"Workers a pool needs now for its queued and running jobs and its unmet demand, without the scale-down delay.", []string{"pool"}, nil)
	boundsDesc = prometheus.NewDesc(namespace+"_pool_workers_bound",
		"A pool's min_workers and max_workers (0: unbounded).", []string{"pool", "bound"}, nil)
	demandDesc = prometheus.NewDesc(namespace+"_pool_demand_unmet",
		"1 while requests found a pool without a worker and none became healthy since.", []string{"pool"}, nil)
	coldStartDesc = prometheus.NewDesc(namespace+"_pool_cold_start_seconds",
		"The last measured cold start of a pool: from the first request that found no worker to the first healthy worker.", []string{"pool"}, nil)
	stateUpDesc = prometheus.NewDesc(namespace+"_state_read_ok",
		"1 when the last scrape read the job counts from storage, 0 when it failed.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *State) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- runningDesc
	ch <- workersDesc
	ch <- stateUpDesc
	ch <- desiredDesc
	ch <- neededDesc
	ch <- boundsDesc
	ch <- demandDesc
	ch <- coldStartDesc
}

// Collect implements prometheus.Collector. A storage that cannot be read
// leaves the job gauges out of this scrape (a gap, not a false zero) and
// says so in comfygate_state_read_ok.
func (s *State) Collect(ch chan<- prometheus.Metric) {
	if s.Jobs != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
		counts, err := s.Jobs(ctx)
		cancel()
		ok := 0.0
		if err == nil {
			ok = 1
			for pool, c := range counts {
				ch <- prometheus.MustNewConstMetric(queuedDesc, prometheus.GaugeValue, float64(c.Queued), pool)
				ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(c.Running), pool)
			}
		}
		ch <- prometheus.MustNewConstMetric(stateUpDesc, prometheus.GaugeValue, ok)
	}
	if s.Scale != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
		pools, err := s.Scale(ctx)
		cancel()
		for _, p := range pools {
			if err != nil {
				break
			}
			demand := 0.0
			if p.DemandUnmet {
				demand = 1
			}
			ch <- prometheus.MustNewConstMetric(desiredDesc, prometheus.GaugeValue, float64(p.Desired), p.Pool)
			ch <- prometheus.MustNewConstMetric(neededDesc, prometheus.GaugeValue, float64(p.Needed), p.Pool)
			ch <- prometheus.MustNewConstMetric(boundsDesc, prometheus.GaugeValue, float64(p.Min), p.Pool, "min")
			ch <- prometheus.MustNewConstMetric(boundsDesc, prometheus.GaugeValue, float64(p.Max), p.Pool, "max")
			ch <- prometheus.MustNewConstMetric(demandDesc, prometheus.GaugeValue, demand, p.Pool)
			ch <- prometheus.MustNewConstMetric(coldStartDesc, prometheus.GaugeValue, p.ColdStartSeconds, p.Pool)
		}
	}
	if s.Workers != nil {
		for _, w := range s.Workers() {
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(w.N), w.Pool, w.Health)
		}
	}
}
