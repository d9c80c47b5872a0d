package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.JobStore = (*Store)(nil)

// jobColumns is the SELECT list scanJob reads, in order.
const jobColumns = `id, account_id, pool, status, workflow, created_at, started_at, completed_at,
	expires_at, progress, error, attempt, coalesce(deployment_id, ''),
	price_per_job, price_per_second, reserved_credits, charged_credits`

// assetColumnsA is assetColumns qualified for joins with job_outputs.
const assetColumnsA = `a.id, a.account_id, a.hash, a.size_bytes, a.content_type, a.file_path, a.tags,
	a.job_id, a.created_at, a.expires_at, coalesce(a.deployment_id, ''),
	coalesce((SELECT b.object_key FROM blobs b WHERE b.hash = a.hash), '')`

// ownsLease is the condition every attempt write carries: the attempt still
// holds the job. It is how a reclaimed attempt's late writes are refused.
const ownsLease = `id = ? AND attempt = ? AND status IN ('running', 'canceling')`

// assetHeldByJob is true for an asset (the outer row, named assets) that is
// an output of a job that is not expired and whose retention deadline is
// after the one argument (the clock). Such an asset cannot be deleted: a job
// keeps its outputs until it expires or its retention passes, whatever its
// status.
const assetHeldByJob = `EXISTS (SELECT 1 FROM job_outputs o JOIN jobs j ON j.id = o.job_id
	WHERE o.asset_id = assets.id AND j.status <> 'expired' AND j.expires_at > ?)`

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// nullJSON maps an absent JSON value to NULL.
func nullJSON(b json.RawMessage) sql.NullString {
	return sql.NullString{String: string(b), Valid: len(b) > 0}
}

// CreateJob records a queued job. The duplicate checks, the queue bounds
// and a priced job's reservation are evaluated inside one write
// transaction, which the single writer serializes, so concurrent creates
// can neither pass a bound nor overdraw a balance. A duplicate ID or
// idempotency key wins over every refusal. The job's turn follows the
// storage package's fair-share rule, and its QueuePosition is read in the
// same transaction, so it is exact.
func (s *Store) CreateJob(ctx context.Context, j storage.NewJob) (storage.Job, error) {
	if j.ID == "" || j.AccountID == "" || j.Pool == "" {
		return storage.Job{}, errors.New("embedded: CreateJob needs ID, AccountID and Pool")
	}
	if !storage.ValidJSON(j.Workflow) {
		return storage.Job{}, errors.New("embedded: CreateJob needs a valid JSON workflow")
	}
	if j.Price != nil && !j.Price.Valid() {
		return storage.Job{}, errors.New("embedded: CreateJob: invalid price")
	}
	job := storage.Job{
		ID: j.ID, AccountID: j.AccountID, Pool: j.Pool, DeploymentID: j.DeploymentID, Status: storage.JobQueued,
		Workflow: append(json.RawMessage(nil), j.Workflow...), CreatedAt: now(),
		ExpiresAt: j.ExpiresAt.UTC().Truncate(time.Microsecond), Outputs: []storage.Output{},
	}
	var perJob, perSecond, reserved sql.NullInt64
	if p := j.Price; p != nil {
		job.Credits = &storage.JobCredits{PerJob: p.PerJob, PerSecond: p.PerSecond, Reserved: p.Reserve}
		perJob, perSecond, reserved = sql.NullInt64{Int64: p.PerJob, Valid: true},
			sql.NullInt64{Int64: p.PerSecond, Valid: true}, sql.NullInt64{Int64: p.Reserve, Valid: true}
	}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var dup bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = ?)
			OR EXISTS (SELECT 1 FROM jobs WHERE account_id = ? AND idempotency_key = ?)`,
			j.ID, j.AccountID, nullString(j.IdempotencyKey)).Scan(&dup); err != nil {
			return fmt.Errorf("embedded: check duplicate job: %w", err)
		}
		if dup {
			return storage.ErrDuplicate
		}
		if err := checkQueueBounds(ctx, tx, j); err != nil {
			return err
		}
		var turn int64
		if err := tx.QueryRowContext(ctx, `SELECT coalesce(
				(SELECT turn + 1 FROM jobs WHERE pool = ? AND account_id = ? AND status = 'queued'
					ORDER BY turn DESC LIMIT 1),
				(SELECT turn FROM jobs WHERE pool = ? AND status = 'queued' ORDER BY turn, created_at, id LIMIT 1), 0)`,
			j.Pool, j.AccountID, j.Pool).Scan(&turn); err != nil {
			return fmt.Errorf("embedded: job turn: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO jobs
			(id, account_id, pool, status, workflow, created_at, expires_at, idempotency_key, deployment_id, turn,
				price_per_job, price_per_second, reserved_credits, trace_parent)
			VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			j.ID, j.AccountID, j.Pool, string(j.Workflow), formatTime(job.CreatedAt),
			formatTime(job.ExpiresAt), nullString(j.IdempotencyKey), nullString(j.DeploymentID), turn,
			perJob, perSecond, reserved, nullString(j.TraceParent))
		if isUniqueViolation(err) {
			return fmt.Errorf("embedded: insert job: %w", storage.ErrDuplicate)
		}
		if err != nil {
			return fmt.Errorf("embedded: insert job: %w", err)
		}
		if j.Price != nil {
			e := storage.CreditEntry{AccountID: j.AccountID, Kind: storage.CreditReservation,
				Amount: -j.Price.Reserve, JobID: j.ID}
			if err := addEntry(ctx, tx, &e); err != nil {
				return err
			}
		}
		job.QueuePosition, err = queuePosition(ctx, tx, j.ID)
		return err
	})
	if err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// checkQueueBounds applies the storage package's fair-admission rule to
// j. The pool's queued count is one row (queue_counts, migration 0008).
// The account's is counted only under a bound: its own, or the pool's
// once the pool holds MaxQueued (then no further than the larger); the
// pool's accounts (a scan of its queue, bounded by 2 × MaxQueued) only
// when the rule needs them.
func checkQueueBounds(ctx context.Context, tx *sql.Tx, j storage.NewJob) error {
	if j.MaxQueued <= 0 && j.AccountMaxQueued <= 0 {
		return nil
	}
	a := storage.Admission{MaxQueued: j.MaxQueued, AccountMaxQueued: j.AccountMaxQueued}
	if err := tx.QueryRowContext(ctx, `SELECT coalesce((SELECT n FROM queue_counts WHERE pool = ?), 0)`,
		j.Pool).Scan(&a.PoolQueued); err != nil {
		return fmt.Errorf("embedded: count queued jobs: %w", err)
	}
	limit := j.AccountMaxQueued
	if j.MaxQueued > 0 && a.PoolQueued >= j.MaxQueued {
		limit = max(limit, j.MaxQueued)
	}
	if limit > 0 {
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs
			WHERE pool = ? AND account_id = ? AND status = 'queued' LIMIT ?)`,
			j.Pool, j.AccountID, limit).Scan(&a.AccountQueued); err != nil {
			return fmt.Errorf("embedded: count the account's queued jobs: %w", err)
		}
	}
	if a.NeedsAccounts() {
		if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT account_id) FROM jobs WHERE pool = ? AND status = 'queued'`,
			j.Pool).Scan(&a.Accounts); err != nil {
			return fmt.Errorf("embedded: count the pool's accounts: %w", err)
		}
	}
	return storage.Admit(a)
}

// GetJob returns the account's job with its outputs and, when it is
// queued, its QueuePosition, read in one snapshot.
func (s *Store) GetJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	tx, err := s.read.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return storage.Job{}, fmt.Errorf("embedded: get job: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	job, err := loadJob(ctx, tx, `id = ? AND account_id = ?`, id, accountID)
	if err != nil || job.Status != storage.JobQueued {
		return job, err
	}
	job.QueuePosition, err = queuePosition(ctx, tx, id)
	if err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// ListJobs returns the account's jobs newest first (created_at, then id,
// descending), with their outputs. A Limit outside 1..101 means 100
// (storage.JobQueryLimit).
func (s *Store) ListJobs(ctx context.Context, accountID string, q storage.JobQuery) ([]storage.Job, error) {
	var where []string
	var args []any
	if accountID != "" {
		where, args = append(where, `account_id = ?`), append(args, accountID)
	}
	if len(q.Statuses) > 0 {
		where = append(where, `status IN (?`+strings.Repeat(`, ?`, len(q.Statuses)-1)+`)`)
		for _, st := range q.Statuses {
			args = append(args, st)
		}
	}
	if q.DeploymentID != "" {
		where = append(where, `deployment_id = ?`)
		args = append(args, q.DeploymentID)
	}
	if q.Before != nil {
		// created_at <= the cursor's, stated apart, is the index range
		// that starts the scan at the cursor; the OR only drops its ties.
		where = append(where, `created_at <= ? AND (created_at < ? OR (created_at = ? AND id < ?))`)
		c := formatTime(q.Before.CreatedAt)
		args = append(args, c, c, c, q.Before.ID)
	}
	args = append(args, storage.JobQueryLimit(q.Limit))
	filter := ``
	if len(where) > 0 {
		filter = ` WHERE ` + strings.Join(where, ` AND `)
	}
	jobs, err := queryJobs(ctx, s.read, `SELECT `+jobColumns+` FROM jobs`+filter+
		` ORDER BY created_at DESC, id DESC LIMIT ?`, args...)
	if err != nil {
		return nil, err
	}
	return jobs, attachOutputs(ctx, s.read, jobs)
}

// attachOutputs reads the outputs of every job in jobs with one query and
// sets each job's Outputs, in commit order.
func attachOutputs(ctx context.Context, q querier, jobs []storage.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	byID := make(map[string]*storage.Job, len(jobs))
	args := make([]any, len(jobs))
	for i := range jobs {
		jobs[i].Outputs = []storage.Output{}
		byID[jobs[i].ID] = &jobs[i]
		args[i] = jobs[i].ID
	}
	rows, err := q.QueryContext(ctx, `SELECT o.job_id, o.node_id, o.name, o.type, coalesce(o.folder_type, ''), `+assetColumnsA+`
		FROM job_outputs o JOIN assets a ON a.id = o.asset_id
		WHERE o.job_id IN (?`+strings.Repeat(`, ?`, len(jobs)-1)+`) ORDER BY o.job_id, o.seq`, args...)
	if err != nil {
		return fmt.Errorf("embedded: list job outputs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var jobID string
		var o storage.Output
		if o.Asset, err = scanAsset(rows, &jobID, &o.NodeID, &o.Name, &o.Type, &o.Folder); err != nil {
			return fmt.Errorf("embedded: list job outputs: %w", err)
		}
		j := byID[jobID]
		j.Outputs = append(j.Outputs, o)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("embedded: list job outputs: %w", err)
	}
	return nil
}

// CountJobs counts each pool's queued and running (or canceling) jobs on
// the partial indexes of the queue and of leased jobs.
func (s *Store) CountJobs(ctx context.Context) (map[string]storage.PoolCounts, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT pool, sum(status = 'queued'), sum(status <> 'queued') FROM (
			SELECT pool, status FROM jobs WHERE status = 'queued'
			UNION ALL
			SELECT pool, status FROM jobs WHERE status IN ('running', 'canceling'))
		GROUP BY pool`)
	if err != nil {
		return nil, fmt.Errorf("embedded: count jobs: %w", err)
	}
	defer rows.Close()
	counts := map[string]storage.PoolCounts{}
	for rows.Next() {
		var pool string
		var c storage.PoolCounts
		if err := rows.Scan(&pool, &c.Queued, &c.Running); err != nil {
			return nil, fmt.Errorf("embedded: count jobs: %w", err)
		}
		counts[pool] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: count jobs: %w", err)
	}
	return counts, nil
}

// QueuePosition is the job's 1-based place among its pool's queued jobs in
// claim order; 0 when the job is not queued or does not exist.
func (s *Store) QueuePosition(ctx context.Context, id string) (int, error) {
	return queuePosition(ctx, s.read, id)
}

// queuePosition is QueuePosition read through q (a transaction of the
// caller's, so that the position agrees with what it read or wrote there).
// The jobs ahead are counted on jobs_turns up to
// storage.ExactQueuePositions; beyond it the position is
// storage.EstimateQueuePosition from the pool's queue_counts row and its
// front and back turns, so the cost does not grow with the queue. Read
// outside a transaction the two statements may see different commits; the
// estimate's bounds keep the answer within the queue either way.
func queuePosition(ctx context.Context, q querier, id string) (int, error) {
	var ahead int
	var pool string
	var turn int64
	err := q.QueryRowContext(ctx, `SELECT j.pool, j.turn, (SELECT count(*) FROM (SELECT 1 FROM jobs q
			WHERE q.pool = j.pool AND q.status = 'queued' AND (q.turn, q.created_at, q.id) < (j.turn, j.created_at, j.id)
			LIMIT ?))
		FROM jobs j WHERE j.id = ? AND j.status = 'queued'`, storage.ExactQueuePositions, id).Scan(&pool, &turn, &ahead)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("embedded: queue position: %w", err)
	}
	if ahead < storage.ExactQueuePositions {
		return ahead + 1, nil
	}
	var front, back, queued int64
	if err := q.QueryRowContext(ctx, `SELECT
			coalesce((SELECT turn FROM jobs WHERE pool = ? AND status = 'queued' ORDER BY turn, created_at, id LIMIT 1), 0),
			coalesce((SELECT turn FROM jobs WHERE pool = ? AND status = 'queued'
				ORDER BY turn DESC, created_at DESC, id DESC LIMIT 1), 0),
			coalesce((SELECT n FROM queue_counts WHERE pool = ?), 0)`, pool, pool, pool).
		Scan(&front, &back, &queued); err != nil {
		return 0, fmt.Errorf("embedded: queue position estimate: %w", err)
	}
	return storage.EstimateQueuePosition(turn, front, back, queued), nil
}

// CancelJob moves a queued job to canceled and a running one to canceling;
// any other job is returned unchanged.
func (s *Store) CancelJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	var job storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		t := formatTime(now())
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET
				status = CASE status WHEN 'queued' THEN 'canceled' ELSE 'canceling' END,
				completed_at = CASE status WHEN 'queued' THEN ? ELSE completed_at END
			WHERE id = ? AND account_id = ? AND status IN ('queued', 'running')`, t, id, accountID); err != nil {
			return fmt.Errorf("embedded: cancel job: %w", err)
		}
		var err error
		if job, err = loadJob(ctx, tx, `id = ? AND account_id = ?`, id, accountID); err != nil {
			return err
		}
		job, err = settleJob(ctx, tx, job, false) // a queued job's refund
		return err
	})
	return job, err
}

// loadJob reads the one job matching where, with its outputs in seq order.
func loadJob(ctx context.Context, q querier, where string, args ...any) (storage.Job, error) {
	job, err := scanJob(q.QueryRowContext(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.Job{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.Job{}, fmt.Errorf("embedded: read job: %w", err)
	}
	rows, err := q.QueryContext(ctx, `SELECT o.node_id, o.name, o.type, coalesce(o.folder_type, ''), `+assetColumnsA+`
		FROM job_outputs o JOIN assets a ON a.id = o.asset_id
		WHERE o.job_id = ? ORDER BY o.seq`, job.ID)
	if err != nil {
		return storage.Job{}, fmt.Errorf("embedded: read job outputs: %w", err)
	}
	defer rows.Close()
	job.Outputs = []storage.Output{}
	for rows.Next() {
		var o storage.Output
		if o.Asset, err = scanAsset(rows, &o.NodeID, &o.Name, &o.Type, &o.Folder); err != nil {
			return storage.Job{}, fmt.Errorf("embedded: read job output: %w", err)
		}
		job.Outputs = append(job.Outputs, o)
	}
	if err := rows.Err(); err != nil {
		return storage.Job{}, fmt.Errorf("embedded: read job outputs: %w", err)
	}
	return job, nil
}

// queryJobs reads jobs (without outputs) in the query's order.
func queryJobs(ctx context.Context, q querier, query string, args ...any) ([]storage.Job, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("embedded: list jobs: %w", err)
	}
	defer rows.Close()
	var jobs []storage.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("embedded: list jobs: %w", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: list jobs: %w", err)
	}
	return jobs, nil
}

// scanJob reads one row in jobColumns order.
func scanJob(row scanner) (storage.Job, error) {
	var (
		j                                 storage.Job
		workflow                          []byte
		createdAt, expiresAt              string
		startedAt, completedAt            sql.NullString
		progress, jobErr                  sql.NullString
		perJob, perSecond, reserved, paid sql.NullInt64
	)
	if err := row.Scan(&j.ID, &j.AccountID, &j.Pool, &j.Status, &workflow, &createdAt, &startedAt,
		&completedAt, &expiresAt, &progress, &jobErr, &j.Attempt, &j.DeploymentID,
		&perJob, &perSecond, &reserved, &paid); err != nil {
		return storage.Job{}, err
	}
	if reserved.Valid {
		j.Credits = &storage.JobCredits{PerJob: perJob.Int64, PerSecond: perSecond.Int64, Reserved: reserved.Int64}
		if paid.Valid {
			j.Credits.Charged = &paid.Int64
		}
	}
	j.Workflow = append(json.RawMessage(nil), workflow...)
	if progress.Valid {
		j.Progress = json.RawMessage(progress.String)
	}
	if jobErr.Valid {
		j.Error = json.RawMessage(jobErr.String)
	}
	var err error
	if j.CreatedAt, err = parseTime(createdAt); err != nil {
		return storage.Job{}, err
	}
	if j.ExpiresAt, err = parseTime(expiresAt); err != nil {
		return storage.Job{}, err
	}
	if j.StartedAt, err = parseNullTime(startedAt); err != nil {
		return storage.Job{}, err
	}
	if j.CompletedAt, err = parseNullTime(completedAt); err != nil {
		return storage.Job{}, err
	}
	return j, nil
}

// releaseOutputRows prepares the account's asset id for deletion inside tx:
// storage.ErrInUse while a job that has not expired holds it as an output;
// otherwise the output rows of expired jobs that name it are deleted (the
// caller's rollback restores them if the asset delete then fails).
func releaseOutputRows(ctx context.Context, tx *sql.Tx, accountID, id string) error {
	var held bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM assets
		WHERE id = ? AND account_id = ? AND `+assetHeldByJob+`)`, id, accountID, formatTime(now())).Scan(&held); err != nil {
		return fmt.Errorf("embedded: check asset in use: %w", err)
	}
	if held {
		return storage.ErrInUse
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_outputs WHERE asset_id = ?
		AND EXISTS (SELECT 1 FROM assets WHERE id = ? AND account_id = ?)`, id, id, accountID); err != nil {
		return fmt.Errorf("embedded: release asset outputs: %w", err)
	}
	return nil
}
