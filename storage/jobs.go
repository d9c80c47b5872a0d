package storage

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Job statuses, as the contract names them.
const (
	JobQueued    = "queued"
	JobRunning   = "running"
	JobSucceeded = "succeeded"
	JobCanceling = "canceling"
	JobCanceled  = "canceled"
	JobFailed    = "failed"
	JobExpired   = "expired"
)

// SortJobs orders jobs oldest first (creation time, then id): the order the
// backends' reaper methods promise, whatever order the database returned.
func SortJobs(jobs []Job) {
	slices.SortFunc(jobs, func(a, b Job) int {
		if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
}

// Terminal reports whether status is final.
func Terminal(status string) bool {
	switch status {
	case JobSucceeded, JobCanceled, JobFailed, JobExpired:
		return true
	}
	return false
}

var (
	// ErrQueueFull means the pool's queue is at its bound.
	ErrQueueFull = errors.New("storage: queue full")
	// ErrLeaseLost means the attempt no longer owns the job (it was
	// reclaimed, or the job ended); the attempt must stop writing.
	ErrLeaseLost = errors.New("storage: lease lost")
)

// Fair share. Every queued job carries a turn, and ClaimJob takes a pool's
// jobs in (turn, CreatedAt, ID) order. A new job's turn is the later of the
// account's last queued turn in the pool + 1 and the pool's front turn (the
// lowest queued one). An account's jobs thus take consecutive turns behind
// its own queue, while another account's new job takes the front turn: the
// claim order goes round-robin across the accounts with queued work, and an
// account with 10 000 queued jobs delays another account's single job by
// at most one job per worker slot. Both reads are index probes, so neither
// submission nor claim scans the queue. A job handed back to the queue
// keeps its turn (and so its place).

// Job is one execution of a workflow.
type Job struct {
	ID        string
	AccountID string
	// Pool names the worker pool that runs the job.
	Pool string
	// DeploymentID is the serverless deployment the job was submitted
	// through; empty for the self-hosted and cloud surfaces.
	DeploymentID string
	Status       string
	// Workflow is the API-format graph as submitted (never extra_data).
	Workflow    json.RawMessage
	CreatedAt   time.Time
	StartedAt   *time.Time
	CompletedAt *time.Time
	ExpiresAt   time.Time
	// Progress is the latest progress snapshot (JSON object); nil until known.
	Progress json.RawMessage
	// Error is the job.error object; nil unless the job failed.
	Error json.RawMessage
	// Attempt counts claims; the running attempt is Attempt.
	Attempt int
	// Outputs in the order they were committed (GetJob and ClaimJob fill it).
	Outputs []Output
	// QueuePosition is the job's 1-based place among its pool's queued
	// jobs as read with the job; 0 when not queued or not read. CreateJob
	// and GetJob fill it; other methods leave it 0.
	QueuePosition int
	// Credits is what the job reserved and was charged; nil for a job
	// created without a Price.
	Credits *JobCredits
	// TraceParent is the W3C traceparent of the submit's span (migration
	// 0013), which the attempts' spans continue; "" when the job was
	// submitted without tracing. Only ClaimJob fills it.
	TraceParent string
}

// Output is one committed output of a job: an asset with its node and kind.
type Output struct {
	NodeID string
	// Name is the file name the node gave it.
	Name string
	// Type is image, video, audio, text, file or latent.
	Type string
	// Folder is the ComfyUI folder type the node wrote the file to:
	// "output" (SaveImage), "temp" (PreviewImage); "" for outputs recorded
	// before it was kept, which count as "output".
	Folder string
	Asset  Asset
}

// NewJob is what a caller supplies to create a job.
type NewJob struct {
	ID        string
	AccountID string
	Pool      string
	// DeploymentID is the deployment the job is submitted through, if any.
	DeploymentID string
	Workflow     json.RawMessage
	ExpiresAt    time.Time
	// IdempotencyKey, when set, is unique per account among jobs: the
	// durable backstop behind the ClaimStore.
	IdempotencyKey string
	// MaxQueued is the pool's queue bound, shared by its accounts by the
	// fair-admission rule (admission.go); 0 means unbounded. A refused
	// create returns a *QueueFullError (ErrQueueFull) and records nothing.
	// Concurrent creates never pass the bounds (a backend serializes a
	// pool's bounded admissions), and none is refused while the rule
	// admits it as the queue was last committed.
	MaxQueued int
	// AccountMaxQueued bounds the account's own queued jobs in the pool; 0
	// means unbounded. Over it the QueueFullError is also
	// ErrAccountQueueFull.
	AccountMaxQueued int
	// Price, when set, prices the job: Price.Reserve credits are taken
	// from the account's balance in the same transaction as the job's
	// insert, or CreateJob returns ErrInsufficientCredits and records
	// nothing. Concurrent creates never take the balance below zero.
	Price *JobPrice
	// TraceParent, when set, is the W3C traceparent of the submit's span,
	// kept with the job so its attempts join the submit's trace.
	TraceParent string
}

// NewOutput is an output an attempt commits: the asset to create (its
// AccountID and JobID are taken from the job) plus its node and kind.
type NewOutput struct {
	NodeID string
	Name   string
	Type   string
	// Folder is "output", "temp" or "" (see Output.Folder).
	Folder string
	Asset  NewAsset
}

// JobQuery selects jobs for a list, newest first.
type JobQuery struct {
	// Statuses filters by status; empty means all.
	Statuses []string
	// Limit is the page size (1..100), or 101 to read one row past the
	// largest page (whether a next page exists).
	Limit int
	// Before, when set, continues after the job with this creation time and id.
	Before *JobCursor
	// DeploymentID, when set, selects only the jobs of that deployment.
	DeploymentID string
}

// JobCursor is a position in a newest-first list.
type JobCursor struct {
	CreatedAt time.Time
	ID        string
}

// JobStore keeps jobs, their queue, leases and outputs.
type JobStore interface {
	// CreateJob records a queued job (durably, before it returns) and
	// returns it with its QueuePosition. Under concurrent creates the
	// position may be off by the number in flight (as the bound may).
	CreateJob(ctx context.Context, j NewJob) (Job, error)
	// GetJob returns the account's job with its outputs (and QueuePosition
	// when it is queued), or ErrNotFound.
	GetJob(ctx context.Context, accountID, id string) (Job, error)
	// ListJobs returns the account's jobs, newest first, with their
	// outputs (read for the whole page at once); every account's when
	// accountID is empty (the operator's view).
	ListJobs(ctx context.Context, accountID string, q JobQuery) ([]Job, error)
	// CountJobs returns each pool's queued jobs and its running (or
	// canceling) ones. Pools with neither may be left out.
	CountJobs(ctx context.Context) (map[string]PoolCounts, error)
	// QueuePosition is the 1-based position of a queued job among its
	// pool's queued jobs in claim order; 0 when it is not queued.
	QueuePosition(ctx context.Context, id string) (int, error)
	// ClaimJob moves the pool's next queued job to running for a new
	// attempt (Attempt+1) leased to owner until now+lease, sets StartedAt
	// on the first attempt, and removes the outputs of earlier attempts
	// (calling remove for blobs left unreferenced once the claim has
	// committed, as DeleteAsset does) so that a reclaimed job
	// never shows duplicate outputs. ErrNotFound when nothing is queued.
	// Concurrent claimers never get the same job.
	//
	// The next job is taken in fair order: round-robin across the accounts
	// with queued work (see the package's "Fair share" note), oldest first
	// within an account; a job handed back to the queue keeps its place.
	// With accountMaxRunning > 0, jobs of an account that already has that
	// many running (or canceling) in the pool are passed over.
	ClaimJob(ctx context.Context, pool, owner string, lease time.Duration, accountMaxRunning int, remove BlobFunc) (Job, error)
	// RenewLease extends the attempt's lease and returns the job's status
	// (so the runner sees canceling). ErrLeaseLost when the attempt no
	// longer owns the job.
	RenewLease(ctx context.Context, id string, attempt int, lease time.Duration) (string, error)
	// SetProgress stores the attempt's latest progress snapshot.
	SetProgress(ctx context.Context, id string, attempt int, progress json.RawMessage) error
	// AddOutput creates the output's asset (owned by the job's account,
	// JobID set) and appends the output, in one transaction, with publish
	// called as in CreateAsset. ErrLeaseLost when the attempt lost the job.
	AddOutput(ctx context.Context, id string, attempt int, out NewOutput, publish Publisher) (Output, error)
	// FinishJob ends the attempt with status (succeeded, failed or
	// canceled) and, for failed, the error object; sets CompletedAt and
	// drops the lease. ErrLeaseLost when the attempt lost the job.
	FinishJob(ctx context.Context, id string, attempt int, status string, jobErr json.RawMessage) (Job, error)
	// ReleaseJob hands an attempt's job back because its worker was lost:
	// canceling → canceled; running → queued again at once (so another worker
	// takes it without waiting for the lease), or failed with jobErr once the
	// job has had maxAttempts attempts. ErrLeaseLost when the attempt no
	// longer owns the job.
	ReleaseJob(ctx context.Context, id string, attempt, maxAttempts int, jobErr json.RawMessage) (Job, error)
	// CancelJob requests cancellation: queued → canceled at once, running
	// → canceling; canceling and terminal jobs are returned unchanged.
	CancelJob(ctx context.Context, accountID, id string) (Job, error)
	// ReclaimExpired handles attempts whose lease ran out before now:
	// canceling → canceled; running → queued again, or failed with jobErr
	// (worker lost) once the job has had maxAttempts attempts. It returns
	// the jobs it changed.
	ReclaimExpired(ctx context.Context, now time.Time, maxAttempts int, jobErr json.RawMessage) ([]Job, error)
	// ExpireJobs marks expired every non-terminal job past its ExpiresAt and
	// every running job started before runningBefore, up to limit, and
	// returns them. Expired jobs no longer hold their output assets. A
	// store may commit a batch in parts: on an error it returns, with it,
	// the jobs it had already expired.
	ExpireJobs(ctx context.Context, now, runningBefore time.Time, limit int) ([]Job, error)
	// CancelDeploymentJobs cancels every queued and running job of the
	// deployment as CancelJob does (queued → canceled, running →
	// canceling) and returns the jobs it changed, oldest first, without
	// outputs.
	CancelDeploymentJobs(ctx context.Context, deploymentID string) ([]Job, error)
	// DeleteExpiredJobs deletes up to limit terminal jobs whose ExpiresAt
	// is before before, with their output rows and run logs (the output
	// assets follow their own retention), and returns how many it deleted.
	DeleteExpiredJobs(ctx context.Context, before time.Time, limit int) (int, error)
	// SetJobLog stores the attempt's run log, replacing an earlier one.
	// The text must be valid UTF-8 without NUL bytes and at most
	// MaxJobLogBytes long. ErrLeaseLost when the attempt lost the job.
	SetJobLog(ctx context.Context, id string, attempt int, log JobLog) error
	// GetJobLog returns the run log of the account's job; ok is false when
	// the job has none. ErrNotFound when the job does not exist.
	GetJobLog(ctx context.Context, accountID, id string) (log JobLog, ok bool, err error)
}

// MaxJobLogBytes bounds a stored run log.
const MaxJobLogBytes = 1 << 20

// JobLog is what a job's run printed, captured for jobs of serverless
// deployments. It lives in the job's record and goes with it.
type JobLog struct {
	Text string
	// Truncated reports that the run printed more than MaxJobLogBytes and
	// part of it was left out.
	Truncated  bool
	CapturedAt time.Time
}

// ValidJobLog reports whether every backend can store l.
func ValidJobLog(l JobLog) bool {
	return len(l.Text) <= MaxJobLogBytes && utf8.ValidString(l.Text) && !strings.ContainsRune(l.Text, 0)
}

// PoolCounts are a pool's jobs waiting and running.
type PoolCounts struct {
	Queued, Running int64
}

// JobQueryLimit is the number of rows ListJobs reads for q.Limit: as
// JobPageSize, except that it allows one more than the largest page (101),
// which a caller reads to learn whether a next page exists.
func JobQueryLimit(limit int) int {
	if limit == maxJobPage+1 {
		return limit
	}
	return JobPageSize(limit)
}

// maxJobPage is the largest page of jobs.
const maxJobPage = 100

// JobPageSize clamps a list limit to 1..100, treating anything outside as
// 100.
func JobPageSize(limit int) int {
	if limit < 1 || limit > maxJobPage {
		return maxJobPage
	}
	return limit
}

// ValidJSON reports whether b is JSON every backend accepts (valid syntax,
// valid UTF-8), so that a bad value fails the same way everywhere.
func ValidJSON(b []byte) bool { return json.Valid(b) && utf8.Valid(b) }
