package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

// ClaimJob leases the pool's next queued job in fair order (turn, then
// created_at, then id; see the storage package's fair-share note) to owner
// for a new attempt. Lease and start times come from the database clock.
// In the same transaction the outputs of earlier attempts are deleted with
// their assets (remove is called for blobs left without a reference) and
// the earlier progress is cleared.
//
// Without a per-account bound the row is picked with FOR UPDATE SKIP
// LOCKED on the jobs_turns index, so concurrent claimers take distinct jobs
// without waiting on each other. With one (accountMaxRunning > 0) the
// claimers of a pool take turns on a transaction-scoped advisory lock, so
// that each counts the others' claims, and the job is the first in turn
// order among the heads of the accounts below their bound: the accounts
// with queued work are walked on jobs_account_turns (one index probe
// each, not a scan of the queue) and their running jobs counted on
// jobs_account_running, no further than the bound.
func (s *Store) ClaimJob(ctx context.Context, pool, owner string, lease time.Duration, accountMaxRunning int, remove storage.BlobFunc) (storage.Job, error) {
	if remove == nil {
		return storage.Job{}, errors.New("postgres: claim job: needs a remove func")
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Job{}, mapErr("claim job: begin", err)
	}
	defer rollback(ctx, tx)
	pick := `(SELECT id FROM jobs WHERE pool = $1 AND status = 'queued'
		ORDER BY turn, created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED)`
	args := []any{pool, owner, leaseInterval(lease)}
	if accountMaxRunning > 0 {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`, claimLockClass, pool); err != nil {
			return storage.Job{}, mapErr("claim job: lock pool", err)
		}
		pick = `(` + fairPickSQL + `)`
		args = append(args, accountMaxRunning)
	}
	var traceParent string
	job, err := scanJob(tx.QueryRow(ctx, `UPDATE jobs SET status = 'running', attempt = attempt + 1,
			lease_owner = $2, lease_expires_at = now() + $3::bigint * interval '1 microsecond',
			started_at = coalesce(started_at, now()), attempt_started_at = now(), progress = NULL
		WHERE status = 'queued' AND id = `+pick+`
		RETURNING `+jobColumns+`, coalesce(trace_parent, '')`, args...), &traceParent)
	if err != nil {
		return storage.Job{}, mapErr("claim job", err)
	}
	unreferenced, err := dropEarlierOutputs(ctx, tx, job.ID)
	if err != nil {
		return storage.Job{}, fmt.Errorf("postgres: claim job: %w", err)
	}
	job.Outputs = []storage.Output{} // a new attempt starts with none
	job.TraceParent = traceParent
	if err := tx.Commit(ctx); err != nil {
		return storage.Job{}, commitErr("claim job: commit", err)
	}
	// The claim has succeeded whatever happens to the bytes now.
	_, _ = s.removeUnreferenced(ctx, unreferenced, remove)
	return job, nil
}

// claimLockClass is the first half of the advisory lock key that claimers
// of one pool take when accounts have a running bound ("clai").
const claimLockClass int32 = 0x636c6169

// fairPickSQL is the id of pool $1's next job among the accounts with
// fewer than $4 jobs running: accts walks the distinct accounts with
// queued work in any pool (a loose index scan of jobs_account_turns, one
// probe per account), heads takes each one's first job in the pool in turn
// order (none for an account without work there), and the earliest head
// wins.
const fairPickSQL = `WITH RECURSIVE accts AS (
		(SELECT account_id FROM jobs WHERE status = 'queued' AND account_id IS NOT NULL
			ORDER BY account_id LIMIT 1)
		UNION ALL
		SELECT (SELECT j.account_id FROM jobs j WHERE j.status = 'queued' AND j.account_id > a.account_id
			ORDER BY j.account_id LIMIT 1)
		FROM accts a WHERE a.account_id IS NOT NULL)
	SELECT h.id FROM accts a CROSS JOIN LATERAL (
		SELECT id, turn, created_at FROM jobs j WHERE j.account_id = a.account_id AND j.pool = $1
			AND j.status = 'queued' ORDER BY turn, created_at, id LIMIT 1) h
	WHERE a.account_id IS NOT NULL
		AND (SELECT count(*) FROM (SELECT 1 FROM jobs r WHERE r.pool = $1 AND r.account_id = a.account_id
			AND r.status IN ('running', 'canceling') LIMIT $4::bigint) n) < $4::bigint
	ORDER BY h.turn, h.created_at, h.id LIMIT 1`

// dropEarlierOutputs deletes every output of job id (a new attempt has none
// yet) with its asset, then drops the blob references in hash order, the
// lock order every multi-blob release uses. It returns the hashes of the
// blobs left without a reference, whose bytes go after the commit.
func dropEarlierOutputs(ctx context.Context, tx pgx.Tx, id string) ([]string, error) {
	rows, err := tx.Query(ctx, `WITH gone AS (DELETE FROM job_outputs WHERE job_id = $1 RETURNING asset_id)
		DELETE FROM assets WHERE id IN (SELECT asset_id FROM gone) RETURNING hash`, id)
	if err != nil {
		return nil, fmt.Errorf("delete earlier outputs: %w", err)
	}
	counts := map[string]int{}
	for rows.Next() {
		var hash string
		if err := rows.Scan(&hash); err != nil {
			rows.Close()
			return nil, fmt.Errorf("delete earlier outputs: %w", err)
		}
		counts[hash]++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("delete earlier outputs: %w", err)
	}
	hashes := make([]string, 0, len(counts))
	for h := range counts {
		hashes = append(hashes, h)
	}
	slices.Sort(hashes)
	var unreferenced []string
	for _, h := range hashes {
		last, err := dropRefs(ctx, tx, h, counts[h])
		if err != nil {
			return nil, err
		}
		if last {
			unreferenced = append(unreferenced, h)
		}
	}
	return unreferenced, nil
}

// RenewLease extends the attempt's lease to now+lease on the database clock
// and returns the job's status, or storage.ErrLeaseLost.
func (s *Store) RenewLease(ctx context.Context, id string, attempt int, lease time.Duration) (string, error) {
	if !isUUID(id) {
		return "", storage.ErrLeaseLost
	}
	var status string
	err := s.pool.QueryRow(ctx, `UPDATE jobs SET lease_expires_at = now() + $3::bigint * interval '1 microsecond'
		WHERE `+ownsLease+` RETURNING status`, id, attempt, leaseInterval(lease)).Scan(&status)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", storage.ErrLeaseLost
	}
	if err != nil {
		return "", mapErr("renew lease", err)
	}
	return status, nil
}

// SetProgress replaces the attempt's progress snapshot (nil clears it).
func (s *Store) SetProgress(ctx context.Context, id string, attempt int, progress json.RawMessage) error {
	if len(progress) > 0 && !storage.ValidJSON(progress) {
		return errors.New("postgres: set progress: not valid JSON")
	}
	if !isUUID(id) {
		return storage.ErrLeaseLost
	}
	tag, err := s.pool.Exec(ctx, `UPDATE jobs SET progress = $3::text::json WHERE `+ownsLease,
		id, attempt, jsonParam(progress))
	if err != nil {
		return mapErr("set progress", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}

// AddOutput creates the output's asset (the job's account, JobID set) with
// the CreateAsset reference protocol and appends the output with the next
// seq, in one transaction that holds the job's row, so a reclaim cannot slip
// between the lease check and the insert.
func (s *Store) AddOutput(ctx context.Context, id string, attempt int, out storage.NewOutput, publish storage.Publisher) (storage.Output, error) {
	if publish == nil {
		return storage.Output{}, errors.New("postgres: add output: needs a publisher")
	}
	if !isUUID(id) {
		return storage.Output{}, storage.ErrLeaseLost
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Output{}, mapErr("add output: begin", err)
	}
	defer rollback(ctx, tx)
	a := out.Asset
	err = tx.QueryRow(ctx, `SELECT account_id, coalesce(deployment_id, '') FROM jobs WHERE `+ownsLease+` FOR UPDATE`,
		id, attempt).Scan(&a.AccountID, &a.DeploymentID)
	if errors.Is(err, pgx.ErrNoRows) {
		return storage.Output{}, storage.ErrLeaseLost
	}
	if err != nil {
		return storage.Output{}, mapErr("add output: lock job", err)
	}
	a.JobID = id
	tracked := storage.Track(publish)
	created, err := createAssetTx(ctx, tx, a, tracked)
	if err == nil {
		_, err = tx.Exec(ctx, `INSERT INTO job_outputs (job_id, attempt, seq, node_id, name, type, asset_id, folder_type)
			VALUES ($1, $2, (SELECT coalesce(max(seq), 0) + 1 FROM job_outputs WHERE job_id = $1), $3, $4, $5, $6, nullif($7, ''))`,
			id, attempt, out.NodeID, out.Name, out.Type, a.ID, out.Folder)
		err = mapErr("add output: insert", err)
	}
	if err != nil {
		tracked.Failed(err, true) // rolled back: nothing of it committed
		return storage.Output{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		err = commitErr("add output: commit", err)
		tracked.Failed(err, false)
		return storage.Output{}, err
	}
	return storage.Output{NodeID: out.NodeID, Name: out.Name, Type: out.Type, Folder: out.Folder, Asset: created.Asset}, nil
}

// FinishJob ends the attempt with status (succeeded, failed or canceled;
// canceled whatever status says once the job is canceling), keeping jobErr
// only for failed, sets CompletedAt, drops the lease and, in
// the same statement, settles a priced job (not charged when jobErr names
// a platform fault).
func (s *Store) FinishJob(ctx context.Context, id string, attempt int, status string, jobErr json.RawMessage) (storage.Job, error) {
	switch status {
	case storage.JobSucceeded, storage.JobFailed, storage.JobCanceled:
	default:
		return storage.Job{}, fmt.Errorf("postgres: finish job: status %q is not succeeded, failed or canceled", status)
	}
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return storage.Job{}, errors.New("postgres: finish job: error object is not valid JSON")
	}
	if status != storage.JobFailed {
		jobErr = nil
	}
	if !isUUID(id) {
		return storage.Job{}, storage.ErrLeaseLost
	}
	fault := status == storage.JobFailed && storage.PlatformFault(jobErr)
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Job{}, mapErr("finish job: begin", err)
	}
	defer rollback(ctx, tx)
	// A canceling job ends canceled however its attempt ended: the
	// contract has canceling lead only there.
	tag, err := tx.Exec(ctx, settling(`UPDATE jobs SET status = CASE WHEN status = 'canceling' THEN 'canceled' ELSE $3 END,
			error = CASE WHEN status = 'canceling' THEN NULL ELSE $4::text::json END, completed_at = now(),
			lease_owner = NULL, lease_expires_at = NULL, `+chargeSet(`$3::text`, `now()`, `$5::bool`)+`
		WHERE `+ownsLease), id, attempt, status, jsonParam(jobErr), fault)
	if err != nil {
		return storage.Job{}, mapErr("finish job", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.Job{}, storage.ErrLeaseLost
	}
	job, err := loadJob(ctx, tx, `id = $1`, id)
	if err != nil {
		return storage.Job{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		return storage.Job{}, commitErr("finish job: commit", err)
	}
	return job, nil
}

// ReclaimExpired ends every attempt whose lease ran out before now (the
// caller's clock against lease times from the database clock): a canceling
// job becomes canceled; a running one is queued again (Attempt unchanged
// until the next claim) or, once it has had maxAttempts attempts (at least
// 1), failed with jobErr. Terminal jobs get CompletedAt = now. Rows another
// reaper holds are skipped. The changed jobs are returned oldest first,
// without outputs.
func (s *Store) ReclaimExpired(ctx context.Context, now time.Time, maxAttempts int, jobErr json.RawMessage) ([]storage.Job, error) {
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return nil, errors.New("postgres: reclaim: error object is not valid JSON")
	}
	jobs, err := queryJobs(ctx, s.pool, settling(`UPDATE jobs SET `+handBack("$2", "$3", "$1")+`
		WHERE status IN ('running', 'canceling') AND lease_expires_at < $1
			AND id = ANY(ARRAY(SELECT id FROM jobs WHERE status IN ('running', 'canceling') AND lease_expires_at < $1
				FOR UPDATE SKIP LOCKED))`), now, max(maxAttempts, 1), jsonParam(jobErr))
	if err != nil {
		return nil, fmt.Errorf("postgres: reclaim: %w", err)
	}
	storage.SortJobs(jobs)
	return jobs, nil
}

// ExpireJobs marks expired up to limit jobs: non-terminal ones whose
// ExpiresAt is before now, and running ones started before runningBefore.
// CompletedAt is set to now and any lease dropped. Rows another reaper holds
// are skipped. Returned oldest first, without outputs. The rows are picked
// in an ARRAY(…) subquery, which runs once: an IN (… LIMIT … SKIP LOCKED)
// may be run again per row and then take more than limit. The two reasons
// are picked apart, each in its index's order (jobs_expires,
// jobs_running_started) up to limit, so that a batch reads about limit
// index entries however many jobs are due (one ORDER BY over both reasons
// sorted every due job on each batch); fewer than limit rows returned thus
// still means nothing more is due.
func (s *Store) ExpireJobs(ctx context.Context, now, runningBefore time.Time, limit int) ([]storage.Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	const due = `((status IN ('queued', 'running', 'canceling') AND expires_at < $1)
		OR (status = 'running' AND started_at < $2))`
	jobs, err := queryJobs(ctx, s.pool, settling(`UPDATE jobs SET status = 'expired', completed_at = $1,
			lease_owner = NULL, lease_expires_at = NULL, `+chargeSet(`'expired'`, `$1::timestamptz`, `false`)+`
		WHERE `+due+` AND id = ANY(ARRAY(
			SELECT id FROM (SELECT id FROM jobs WHERE status IN ('queued', 'running', 'canceling') AND expires_at < $1
				ORDER BY expires_at LIMIT $3 FOR UPDATE SKIP LOCKED) late
			UNION
			SELECT id FROM (SELECT id FROM jobs WHERE status = 'running' AND started_at < $2
				ORDER BY started_at LIMIT $3 FOR UPDATE SKIP LOCKED) long
			LIMIT $3))`), now, runningBefore, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: expire jobs: %w", err)
	}
	storage.SortJobs(jobs)
	return jobs, nil
}

// handBack is the SET list that takes a job from an attempt that is gone:
// canceling ends canceled (charged for the time it ran), running goes back
// to the queue (at the front: its turn is at most the queue's front turn,
// so with its older CreatedAt it keeps its place; its attempt's start
// forgotten) or, at the last attempt, fails with the error errObj (worker lost: a platform
// fault, not charged). maxAttempts, errObj and end are SQL expressions.
func handBack(maxAttempts, errObj, end string) string {
	status := `CASE WHEN status = 'canceling' THEN 'canceled'
		WHEN attempt >= ` + maxAttempts + ` THEN 'failed' ELSE 'queued' END`
	return `status = ` + status + `,
		error = CASE WHEN status = 'running' AND attempt >= ` + maxAttempts + ` THEN ` + errObj + `::text::json ELSE error END,
		completed_at = CASE WHEN status = 'canceling' OR attempt >= ` + maxAttempts + ` THEN ` + end + ` ELSE NULL END,
		lease_owner = NULL, lease_expires_at = NULL,
		` + chargeSet(status, end, `status = 'running'`) + `,
		attempt_started_at = CASE WHEN status = 'running' AND attempt < ` + maxAttempts + ` THEN NULL
			ELSE attempt_started_at END,
		turn = CASE WHEN status = 'running' AND attempt < ` + maxAttempts + ` THEN least(turn,
			coalesce((SELECT min(q.turn) FROM jobs q WHERE q.pool = jobs.pool AND q.status = 'queued'), turn))
			ELSE turn END`
}

// ReleaseJob implements storage.JobStore.
func (s *Store) ReleaseJob(ctx context.Context, id string, attempt, maxAttempts int, jobErr json.RawMessage) (storage.Job, error) {
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return storage.Job{}, errors.New("postgres: release: error object is not valid JSON")
	}
	if !isUUID(id) {
		return storage.Job{}, storage.ErrLeaseLost
	}
	jobs, err := queryJobs(ctx, s.pool, settling(`UPDATE jobs SET `+handBack("$3", "$4", "now()")+`
		WHERE `+ownsLease), id, attempt, max(maxAttempts, 1), jsonParam(jobErr))
	if err != nil {
		return storage.Job{}, fmt.Errorf("postgres: release: %w", err)
	}
	if len(jobs) == 0 {
		return storage.Job{}, storage.ErrLeaseLost
	}
	return jobs[0], nil
}
