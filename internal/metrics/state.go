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
}

var (
	queuedDesc = prometheus.NewDesc(namespace+"_jobs_queued",
		"Jobs waiting in a pool's queue, from storage (the same on every gateway of one database).", []string{"pool"}, nil)
	runningDesc = prometheus.NewDesc(namespace+"_jobs_running",
		"Jobs running (or canceling) on a pool, from storage.", []string{"pool"}, nil)
	workersDesc = prometheus.NewDesc(namespace+"_pool_workers",
		"Workers of a pool known to this gateway, by health (healthy, unhealthy, draining).", []string{"pool", "health"}, nil)
	stateUpDesc = prometheus.NewDesc(namespace+"_state_read_ok",
		"1 when the last scrape read the job counts from storage, 0 when it failed.", nil, nil)
)

// Describe implements prometheus.Collector.
func (s *State) Describe(ch chan<- *prometheus.Desc) {
	ch <- queuedDesc
	ch <- runningDesc
	ch <- workersDesc
	ch <- stateUpDesc
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
	if s.Workers != nil {
		for _, w := range s.Workers() {
			ch <- prometheus.MustNewConstMetric(workersDesc, prometheus.GaugeValue, float64(w.N), w.Pool, w.Health)
		}
	}
}
