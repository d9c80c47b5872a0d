// Package metrics holds comfygate's own Prometheus series (comfygate_…).
// There is one set per process, so counters run on across configuration
// reloads; the comfygate app registers them in each configuration's
// registry, which is Caddy's (its admin endpoint's /metrics and the
// metrics handler serve it). Labels are bounded: pool, status, code,
// bucket, provider, reason, outcome — never an account, job or model id.
//
// The package knows nothing of Caddy; the code that does the work counts
// it here.
package metrics

import "github.com/prometheus/client_golang/prometheus"

const namespace = "comfygate"

// Buckets of the duration histograms, in seconds.
var (
	// requestBuckets spans uploads and partner calls: 5 ms to ~10 min.
	requestBuckets = prometheus.ExponentialBuckets(0.005, 2.5, 12)
	// jobBuckets spans queue waits and executions: 50 ms to ~2 h.
	jobBuckets = prometheus.ExponentialBuckets(0.05, 2.5, 16)
)

func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: name, Help: help}, labels)
}

func histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: namespace, Name: name, Help: help,
		Buckets: buckets}, labels)
}

// Jobs.
var (
	JobsSubmitted = counterVec("jobs_submitted_total", "Jobs accepted for execution (201 answers), by pool.", "pool")
	JobsFinished  = counterVec("jobs_finished_total",
		"Jobs that reached a terminal status, by pool and status (succeeded, failed, canceled, expired).", "pool", "status")
	JobQueueWait = histogramVec("job_queue_wait_seconds",
		"Time from submission to the start of a job's first attempt, by pool.", jobBuckets, "pool")
	JobExecution = histogramVec("job_execution_seconds",
		"Time from the start of a job's first attempt to its end, by pool and terminal status.", jobBuckets, "pool", "status")
	AttemptsReclaimed = counterVec("job_attempts_reclaimed_total",
		"Attempts handed back to the queue because their worker or process was lost, by pool.", "pool")
)

// Uploads.
var (
	Uploads = counterVec("uploads_total",
		"Asset uploads that created an asset, by outcome: stored (new bytes) or deduplicated (bytes the account held).", "outcome")
	UploadBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "upload_bytes_total",
		Help: "Bytes received in uploads that created an asset."})
	UploadDuration = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: namespace, Name: "upload_duration_seconds",
		Help: "Time to receive, hash and store an upload that created an asset.", Buckets: requestBuckets})
	UploadRefusals = counterVec("upload_refusals_total", "Uploads refused, by error code.", "code")
)

// Event streams and idempotency.
var (
	StreamsOpen = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "event_streams_open",
		Help: "Job event streams open in this process."})
	IdempotencyKeyReuses = counterVec("idempotency_key_reuses_total",
		"Requests refused because their Idempotency-Key was already used (422 idempotency_key_reuse), by route (assets, jobs).", "route")
)

// Model router.
var (
	RouterCalls = counterVec("router_calls_total",
		"Model router calls, by provider and bucket (ok for a success, else the X-Service-Error-Type).", "provider", "bucket")
	RouterCallDuration = histogramVec("router_call_duration_seconds",
		"Time from a router call's admission to its answer, by provider.", requestBuckets, "provider")
	RouterLimitRefusals = counterVec("router_limit_refusals_total",
		"Router calls refused by a limit, by reason (in_flight, spend, rate, credits).", "reason")
	RouterReplays = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "router_idempotent_replays_total",
		Help: "Router answers replayed for a repeated Idempotency-Key."})
	RouterSpendReserved = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "router_spend_reserved_cents_total",
		Help: "Spend reserved at the admission of router calls, in cents."})
	RouterSpendSettled = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "router_spend_settled_cents_total",
		Help: "Spend settled (charged) when router calls finished, in cents."})
	RouterRehostCopies = counterVec("router_rehost_copies_total",
		"Router results copied into the gateway's storage, by kind (url, base64) and outcome (ok, refused_address, too_large, timeout, bad_result, error).", "kind", "outcome")
	RouterRehostBytes = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "router_rehost_bytes_total",
		Help: "Bytes of router results copied into the gateway's storage."})
	RouterRehostDuration = histogramVec("router_rehost_duration_seconds",
		"Time to copy one router result (fetch or decode, and store), by kind.", requestBuckets, "kind")
)

// Tracing.
var TracingSpansDropped = prometheus.NewCounter(prometheus.CounterOpts{Namespace: namespace, Name: "tracing_spans_dropped_total",
	Help: "Ended spans dropped before export: the export queue was full (OTEL_BSP_MAX_QUEUE_SIZE) or the export was cut short by shutdown."})

// Errors.
var ErrorResponses = counterVec("error_responses_total",
	"Error answers (the v2 envelope and the router's error bodies), by error code.", "code")

// processCollectors are every series above.
var processCollectors = []prometheus.Collector{
	JobsSubmitted, JobsFinished, JobQueueWait, JobExecution, AttemptsReclaimed,
	Uploads, UploadBytes, UploadDuration, UploadRefusals,
	StreamsOpen, IdempotencyKeyReuses,
	RouterCalls, RouterCallDuration, RouterLimitRefusals, RouterReplays, RouterSpendReserved, RouterSpendSettled,
	RouterRehostCopies, RouterRehostBytes, RouterRehostDuration,
	TracingSpansDropped, ErrorResponses,
}

// Register adds this process's series and state (which reads the shared
// figures at scrape time; nil leaves them out) to reg.
func Register(reg prometheus.Registerer, state *State) error {
	for _, c := range processCollectors {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	if state != nil {
		return reg.Register(state)
	}
	return nil
}
