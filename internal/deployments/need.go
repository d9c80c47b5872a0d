package deployments

import (
	"net/http"
	"strings"

	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/storage"
)

// Need is what a request needs of its deployment's pool. A ready
// deployment whose pool has no worker taking jobs (scaled to zero, or its
// only worker draining) still serves what storage holds; it answers
// deployment_not_ready, and counts the demand, only for what waits on a
// worker.
type Need int

const (
	// NeedWorker: a job submit, which queues work for a worker that
	// takes jobs; and any request outside /api/v2, which this package
	// does not know to be served from storage. The zero Need, so that a
	// scope nobody classified is refused rather than served.
	NeedWorker Need = iota
	// NeedStorage: served from storage whatever the workers: a job, the
	// list, its workflow, a cancel (a queued job is canceled in storage, a
	// running one by its worker), assets and their content, uploads and
	// deletes.
	NeedStorage
	// NeedJobProgress: a job's event stream, which needs a worker only
	// while its job cannot move on without one (see CanProgress).
	NeedJobProgress
)

// NeedOf is what a request needs of the pool, from its method and path;
// jobID names the job of a NeedJobProgress stream.
func NeedOf(method, path string) (need Need, jobID string) {
	_, route, ok := httpx.Route(path)
	if !ok {
		return NeedWorker, ""
	}
	parts := strings.Split(route, "/")
	switch {
	case method == http.MethodPost && route == "jobs":
		return NeedWorker, ""
	case method == http.MethodGet && len(parts) == 3 && parts[0] == "jobs" && parts[2] == "events":
		return NeedJobProgress, parts[1]
	}
	return NeedStorage, ""
}

// CanProgress reports whether a stream of a job in status has something
// to show without a new worker: a terminal job's stream is its final
// status, read from storage; a running or canceling one is on a worker,
// which ends it while the pool has a healthy worker (liveWorker: a
// draining one finishes the jobs it runs); a queued job waits for a worker
// that takes jobs.
func CanProgress(status string, liveWorker bool) bool {
	switch {
	case storage.Terminal(status):
		return true
	case status == storage.JobRunning || status == storage.JobCanceling:
		return liveWorker
	}
	return false
}
