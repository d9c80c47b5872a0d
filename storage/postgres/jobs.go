package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.JobStore = (*Store)(nil)

// jobColumns is the select list scanJob reads, in order. The json columns
// are read as text so the submitted bytes come back unchanged.
const jobColumns = `id::text, account_id, pool, status, workflow::text, created_at, started_at,
	completed_at, expires_at, progress::text, error::text, attempt, coalesce(deployment_id, '')`

// assetColumnsA is assetColumns qualified for joins with job_outputs.
const assetColumnsA = `a.id::text, a.account_id, a.hash, a.size_bytes, a.content_type, a.file_path,
	a.tags, coalesce(a.job_id::text, ''), a.created_at, a.expires_at, coalesce(a.deployment_id, '')`

// ownsLease is the condition every attempt write carries: the attempt still
// holds the job. It is how a reclaimed attempt's late writes are refused.
const ownsLease = `id = $1 AND attempt = $2 AND status IN ('running', 'canceling')`

// assetHeldByJob is true for an asset (the outer row, named assets) that is
// an output of a job that is not expired and whose retention deadline is
// after clock (an SQL expression). Such an asset cannot be deleted: a job
// keeps its outputs until it expires or its retention passes, whatever its
// status.
func assetHeldByJob(clock string) string {
	return `EXISTS (SELECT 1 FROM job_outputs o JOIN jobs j ON j.id = o.job_id
	WHERE o.asset_id = assets.id AND j.status <> 'expired' AND j.expires_at > ` + clock + `)`
}

// querier is what pgx.Tx and *pgxpool.Pool have in common.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// jsonParam maps an absent JSON value to NULL and a present one to its text.
func jsonParam(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// createJobSQL inserts a queued job only when the pool has room, in one
// autocommit statement, and returns the job with its queue position.
//
// q sums the pool's shard rows in queue_counts (migration 0004), which
// triggers on jobs keep equal to its queued jobs: at most 64 rows whatever
// the queue's length, read in the statement's snapshot (committed jobs
// only). The job is inserted when that count is below $7, or when $7 <= 0
// (unbounded); its position is that count + 1. q is referenced twice but
// evaluated once, so the bound and the position agree. A bound that holds
// nothing inserts no row: the statement returns no rows.
const createJobSQL = `WITH q AS (
		SELECT coalesce(sum(n), 0)::bigint AS queued FROM queue_counts WHERE pool = $3)
	INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, idempotency_key, deployment_id)
	SELECT $1, $2, $3, 'queued', $4::text::json, $5, $6, nullif($8, '') FROM q
	WHERE $7::bigint <= 0 OR q.queued < $7::bigint
	RETURNING ` + jobColumns + `, greatest((SELECT queued FROM q), 0) + 1`

// CreateJob records a queued job in one autocommit statement: createJobSQL
// when it is alone, or one createBatchSQL for many concurrent creates (see
// jobs_batch.go); either way one round trip. Submissions are
// not serialized: the insert's trigger holds one of the pool's 64 count
// shards until commit, so only those that pick the same shard wait for
// each other. Each reads the queue as last committed, so concurrent ones
// may pass the bound by at most the number in flight, and none is refused
// while there is room. A duplicate ID or idempotency key wins over a full
// queue: when the pool has room the insert's unique violation reports it,
// and a refusal for a full queue is checked for one before it is returned.
func (s *Store) CreateJob(ctx context.Context, j storage.NewJob) (storage.Job, error) {
	if !isUUID(j.ID) || j.AccountID == "" || j.Pool == "" {
		return storage.Job{}, errors.New("postgres: create job: needs a UUID ID, AccountID and Pool")
	}
	if !storage.ValidJSON(j.Workflow) {
		return storage.Job{}, errors.New("postgres: create job: workflow is not valid JSON")
	}
	r := &createReq{j: j}
	alone, err := s.creates.Do(ctx, r)
	switch {
	case err != nil:
		return storage.Job{}, fmt.Errorf("postgres: create job: %w", err)
	case r.inserted:
		return r.job, nil
	case alone:
		defer s.creates.Leave()
	}
	// Alone, or a job the batch did not insert.
	return s.createOne(ctx, j)
}

// createOne writes j alone with createJobSQL.
func (s *Store) createOne(ctx context.Context, j storage.NewJob) (storage.Job, error) {
	var idemKey *string
	if j.IdempotencyKey != "" {
		idemKey = &j.IdempotencyKey
	}
	var pos int64
	job, err := scanJob(s.pool.QueryRow(ctx, createJobSQL,
		j.ID, j.AccountID, j.Pool, string(j.Workflow), j.ExpiresAt, idemKey, j.MaxQueued, j.DeploymentID), &pos)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return storage.Job{}, s.refuseFull(ctx, j, idemKey)
	case err != nil:
		return storage.Job{}, mapErr("create job", err)
	}
	job.Outputs = []storage.Output{}
	job.QueuePosition = int(pos)
	return job, nil
}

// refuseFull is the error for a create that found the queue full:
// ErrDuplicate when the job's ID or idempotency key is already taken (that
// answer wins over a full queue), else ErrQueueFull.
func (s *Store) refuseFull(ctx context.Context, j storage.NewJob, idemKey *string) error {
	var dup bool
	if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM jobs WHERE id = $1)
		OR EXISTS (SELECT 1 FROM jobs WHERE account_id = $2 AND idempotency_key = $3)`,
		j.ID, j.AccountID, idemKey).Scan(&dup); err != nil {
		return mapErr("create job: check duplicate", err)
	}
	if dup {
		return fmt.Errorf("postgres: create job: %w", storage.ErrDuplicate)
	}
	return storage.ErrQueueFull
}

// GetJob returns the account's job with its outputs and, when it is
// queued, its QueuePosition.
func (s *Store) GetJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	if !isUUID(id) {
		return storage.Job{}, fmt.Errorf("postgres: get job: %w", storage.ErrNotFound)
	}
	// One round trip for the job and its outputs: the hottest read of the
	// API. Outputs only ever grow, so reading them a statement after the
	// job can at most show one that landed in between.
	batch := &pgx.Batch{}
	batch.Queue(`SELECT `+jobColumns+`, `+queuePositionOfJ+` FROM jobs j WHERE id = $1 AND account_id = $2`,
		id, accountID)
	batch.Queue(outputsQuery, id)
	br := s.pool.SendBatch(ctx, batch)
	defer br.Close()
	var pos int64
	job, err := scanJob(br.QueryRow(), &pos)
	if err != nil {
		return storage.Job{}, mapErr("read job", err)
	}
	job.QueuePosition = int(pos)
	rows, err := br.Query()
	if err != nil {
		return storage.Job{}, mapErr("read job outputs", err)
	}
	if job.Outputs, err = scanOutputs(rows); err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// ListJobs returns the account's jobs newest first (created_at, then id,
// descending), with their outputs. A Limit outside 1..100 means 100.
func (s *Store) ListJobs(ctx context.Context, accountID string, q storage.JobQuery) ([]storage.Job, error) {
	var where []string
	var args []any
	if accountID != "" {
		args = append(args, accountID)
		where = append(where, `account_id = $1`)
	}
	if len(q.Statuses) > 0 {
		args = append(args, q.Statuses)
		where = append(where, fmt.Sprintf(`status = ANY($%d::text[])`, len(args)))
	}
	if q.DeploymentID != "" {
		args = append(args, q.DeploymentID)
		where = append(where, fmt.Sprintf(`deployment_id = $%d`, len(args)))
	}
	if q.Before != nil {
		// id::text orders like the uuid for the lower-case form Postgres
		// returns, and accepts a cursor id that is not a UUID.
		args = append(args, q.Before.CreatedAt, q.Before.ID)
		where = append(where, fmt.Sprintf(`(created_at, id::text) < ($%d, $%d)`, len(args)-1, len(args)))
	}
	args = append(args, storage.JobPageSize(q.Limit))
	filter := ``
	if len(where) > 0 {
		filter = ` WHERE ` + strings.Join(where, ` AND `)
	}
	jobs, err := queryJobs(ctx, s.pool, fmt.Sprintf(`SELECT `+jobColumns+` FROM jobs`+filter+
		` ORDER BY created_at DESC, id DESC LIMIT $%d`, len(args)), args...)
	if err != nil {
		return nil, err
	}
	return jobs, attachOutputs(ctx, s.pool, jobs)
}

// attachOutputs reads the outputs of every job in jobs with one query (on
// job_outputs' primary key) and sets each job's Outputs, in commit order.
func attachOutputs(ctx context.Context, q querier, jobs []storage.Job) error {
	if len(jobs) == 0 {
		return nil
	}
	byID := make(map[string]*storage.Job, len(jobs))
	ids := make([]string, len(jobs))
	for i := range jobs {
		jobs[i].Outputs = []storage.Output{}
		byID[jobs[i].ID] = &jobs[i]
		ids[i] = jobs[i].ID
	}
	rows, err := q.Query(ctx, `SELECT o.job_id::text, o.node_id, o.name, o.type, `+assetColumnsA+`
		FROM job_outputs o JOIN assets a ON a.id = o.asset_id
		WHERE o.job_id = ANY($1::uuid[]) ORDER BY o.job_id, o.seq`, ids)
	if err != nil {
		return mapErr("list job outputs", err)
	}
	defer rows.Close()
	for rows.Next() {
		var jobID string
		var o storage.Output
		if o.Asset, err = scanAsset(rows, &jobID, &o.NodeID, &o.Name, &o.Type); err != nil {
			return mapErr("list job outputs", err)
		}
		j := byID[jobID]
		j.Outputs = append(j.Outputs, o)
	}
	if err := rows.Err(); err != nil {
		return mapErr("list job outputs", err)
	}
	return nil
}

// CountJobs reads each pool's queued jobs from queue_counts (O(pools), not
// O(queue)) and its running ones on the partial index of leased jobs.
func (s *Store) CountJobs(ctx context.Context) (map[string]storage.PoolCounts, error) {
	rows, err := s.pool.Query(ctx, `SELECT pool, sum(queued)::bigint, sum(running)::bigint FROM (
			SELECT pool, n AS queued, 0 AS running FROM queue_counts
			UNION ALL
			SELECT pool, 0, count(*) FROM jobs WHERE status IN ('running', 'canceling') GROUP BY pool) AS c
		GROUP BY pool`)
	if err != nil {
		return nil, mapErr("count jobs", err)
	}
	defer rows.Close()
	counts := map[string]storage.PoolCounts{}
	for rows.Next() {
		var pool string
		var c storage.PoolCounts
		if err := rows.Scan(&pool, &c.Queued, &c.Running); err != nil {
			return nil, mapErr("count jobs", err)
		}
		counts[pool] = c
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("count jobs", err)
	}
	return counts, nil
}

// queuePositionOfJ is the 1-based place of the job row j among its pool's
// queued jobs, oldest first, or 0 when j is not queued. It counts the queue
// ahead of j on the jobs_queue index: O(position).
const queuePositionOfJ = `CASE WHEN j.status = 'queued' THEN (SELECT count(*) FROM jobs q
	WHERE q.pool = j.pool AND q.status = 'queued' AND (q.created_at, q.id) <= (j.created_at, j.id))
	ELSE 0 END`

// QueuePosition is the job's 1-based place among its pool's queued jobs,
// oldest first; 0 when the job is not queued or does not exist.
func (s *Store) QueuePosition(ctx context.Context, id string) (int, error) {
	if !isUUID(id) {
		return 0, nil
	}
	var pos int
	err := s.pool.QueryRow(ctx, `SELECT `+queuePositionOfJ+` FROM jobs j WHERE j.id = $1 AND j.status = 'queued'`,
		id).Scan(&pos)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, mapErr("queue position", err)
	}
	return pos, nil
}

// CancelJob moves a queued job to canceled and a running one to canceling;
// any other job is returned unchanged. A claim racing the cancel is waited
// for, and the cancel then applies to the running job.
func (s *Store) CancelJob(ctx context.Context, accountID, id string) (storage.Job, error) {
	if !isUUID(id) {
		return storage.Job{}, fmt.Errorf("postgres: cancel job: %w", storage.ErrNotFound)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Job{}, mapErr("cancel job: begin", err)
	}
	defer rollback(ctx, tx)
	if _, err := tx.Exec(ctx, `UPDATE jobs SET
			status = CASE status WHEN 'queued' THEN 'canceled' ELSE 'canceling' END,
			completed_at = CASE status WHEN 'queued' THEN now() ELSE completed_at END
		WHERE id = $1 AND account_id = $2 AND status IN ('queued', 'running')`, id, accountID); err != nil {
		return storage.Job{}, mapErr("cancel job", err)
	}
	job, err := loadJob(ctx, tx, `id = $1 AND account_id = $2`, id, accountID)
	if err != nil {
		return storage.Job{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return storage.Job{}, mapErr("cancel job: commit", err)
	}
	return job, nil
}

// loadJob reads the one job matching where, with its outputs in seq order.
func loadJob(ctx context.Context, q querier, where string, args ...any) (storage.Job, error) {
	job, err := scanJob(q.QueryRow(ctx, `SELECT `+jobColumns+` FROM jobs WHERE `+where, args...))
	if err != nil {
		return storage.Job{}, mapErr("read job", err)
	}
	rows, err := q.Query(ctx, outputsQuery, job.ID)
	if err != nil {
		return storage.Job{}, mapErr("read job outputs", err)
	}
	if job.Outputs, err = scanOutputs(rows); err != nil {
		return storage.Job{}, err
	}
	return job, nil
}

// outputsQuery reads a job's outputs with their assets, in commit order.
var outputsQuery = `SELECT o.node_id, o.name, o.type, ` + assetColumnsA + `
	FROM job_outputs o JOIN assets a ON a.id = o.asset_id
	WHERE o.job_id = $1 ORDER BY o.seq`

// scanOutputs reads outputsQuery's rows and closes them.
func scanOutputs(rows pgx.Rows) ([]storage.Output, error) {
	defer rows.Close()
	outputs := []storage.Output{}
	for rows.Next() {
		var o storage.Output
		var err error
		if o.Asset, err = scanAsset(rows, &o.NodeID, &o.Name, &o.Type); err != nil {
			return nil, mapErr("read job output", err)
		}
		outputs = append(outputs, o)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("read job outputs", err)
	}
	return outputs, nil
}

// queryJobs reads jobs (without outputs) in the query's order.
func queryJobs(ctx context.Context, q querier, query string, args ...any) ([]storage.Job, error) {
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, mapErr("list jobs", err)
	}
	defer rows.Close()
	var jobs []storage.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, mapErr("list jobs", err)
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("list jobs", err)
	}
	return jobs, nil
}

// scanJob reads one row in jobColumns order, then into extra (columns the
// query selects after jobColumns).
func scanJob(row pgx.Row, extra ...any) (storage.Job, error) {
	var (
		j                storage.Job
		workflow         string
		progress, jobErr *string
	)
	dest := append([]any{&j.ID, &j.AccountID, &j.Pool, &j.Status, &workflow, &j.CreatedAt, &j.StartedAt,
		&j.CompletedAt, &j.ExpiresAt, &progress, &jobErr, &j.Attempt, &j.DeploymentID}, extra...)
	if err := row.Scan(dest...); err != nil {
		return storage.Job{}, err
	}
	j.Workflow = json.RawMessage(workflow)
	if progress != nil {
		j.Progress = json.RawMessage(*progress)
	}
	if jobErr != nil {
		j.Error = json.RawMessage(*jobErr)
	}
	j.CreatedAt = j.CreatedAt.UTC()
	j.ExpiresAt = j.ExpiresAt.UTC()
	j.StartedAt = utcPtr(j.StartedAt)
	j.CompletedAt = utcPtr(j.CompletedAt)
	return j, nil
}

// releaseOutputRows prepares the account's asset id for deletion inside tx:
// storage.ErrInUse while a job that has not expired holds it as an output;
// otherwise the output rows of expired jobs that name it are deleted (the
// caller's rollback restores them if the asset delete then fails).
func releaseOutputRows(ctx context.Context, tx pgx.Tx, accountID, id string) error {
	var held bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets
		WHERE id = $1 AND account_id = $2 AND `+assetHeldByJob("now()")+`)`, id, accountID).Scan(&held); err != nil {
		return mapErr("check asset in use", err)
	}
	if held {
		return fmt.Errorf("postgres: delete asset: %w", storage.ErrInUse)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM job_outputs WHERE asset_id = $1
		AND EXISTS (SELECT 1 FROM assets WHERE id = $1 AND account_id = $2)`, id, accountID); err != nil {
		return mapErr("release asset outputs", err)
	}
	return nil
}

// leaseInterval renders a lease for SQL arithmetic on the database clock.
func leaseInterval(d time.Duration) int64 { return d.Microseconds() }
