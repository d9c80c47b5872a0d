package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// ClaimJob leases the pool's next queued job in fair order (turn, then
// created_at, then id; see the storage package's fair-share note) to owner
// for a new attempt, passing over the accounts that already run
// accountMaxRunning jobs of the pool when that is positive. In the same
// write transaction it deletes the outputs of earlier attempts and their
// assets, and after it calls remove for blobs left without a reference
// (removeUnreferenced); it clears
// the earlier attempt's progress. The single writer makes concurrent
// claimers take distinct jobs and count each other's. Leases run on this
// process's clock.
func (s *Store) ClaimJob(ctx context.Context, pool, owner string, lease time.Duration, accountMaxRunning int, remove storage.BlobFunc) (storage.Job, error) {
	if remove == nil {
		return storage.Job{}, errors.New("embedded: ClaimJob needs a remove func")
	}
	var job storage.Job
	var unreferenced []string
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		id, err := nextJob(ctx, tx, pool, accountMaxRunning)
		if err != nil {
			return err
		}
		t := now()
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'running', attempt = attempt + 1,
				lease_owner = ?, lease_expires_at = ?, started_at = coalesce(started_at, ?),
				attempt_started_at = ?, progress = NULL
			WHERE id = ?`, owner, formatTime(t.Add(lease)), formatTime(t), formatTime(t), id); err != nil {
			return fmt.Errorf("embedded: claim job: %w", err)
		}
		if unreferenced, err = dropEarlierOutputs(ctx, tx, id); err != nil {
			return err
		}
		if job, err = loadJob(ctx, tx, `id = ?`, id); err != nil {
			return err
		}
		err = tx.QueryRowContext(ctx, `SELECT coalesce(trace_parent, '') FROM jobs WHERE id = ?`, id).Scan(&job.TraceParent)
		if err != nil {
			return fmt.Errorf("embedded: claim job: %w", err)
		}
		return nil
	})
	if err != nil {
		return storage.Job{}, err
	}
	// The claim has succeeded whatever happens to the bytes now.
	_, _ = s.removeUnreferenced(ctx, unreferenced, remove)
	return job, nil
}

// nextJob is the id of the pool's next job to claim, or storage.ErrNotFound.
// Without a running bound it is the first on jobs_turns. With one, the
// accounts with queued work (in any pool) are walked one index probe at a
// time (jobs_account_turns), each account's running jobs in the pool
// counted no further than the bound, and the earliest head in the pool
// among the accounts below it wins.
func nextJob(ctx context.Context, tx *sql.Tx, pool string, accountMaxRunning int) (string, error) {
	if accountMaxRunning <= 0 {
		var id string
		err := tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE pool = ? AND status = 'queued'
			ORDER BY turn, created_at, id LIMIT 1`, pool).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return "", storage.ErrNotFound
		}
		if err != nil {
			return "", fmt.Errorf("embedded: claim job: %w", err)
		}
		return id, nil
	}
	type head struct {
		id, created string
		turn        int64
	}
	var best *head
	account := ""
	for {
		err := tx.QueryRowContext(ctx, `SELECT account_id FROM jobs WHERE status = 'queued' AND account_id > ?
			ORDER BY account_id LIMIT 1`, account).Scan(&account)
		if errors.Is(err, sql.ErrNoRows) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("embedded: claim job: %w", err)
		}
		var running int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM (SELECT 1 FROM jobs WHERE pool = ? AND account_id = ?
			AND status IN ('running', 'canceling') LIMIT ?)`, pool, account, accountMaxRunning).Scan(&running); err != nil {
			return "", fmt.Errorf("embedded: claim job: %w", err)
		}
		if running >= accountMaxRunning {
			continue
		}
		var h head
		err = tx.QueryRowContext(ctx, `SELECT id, turn, created_at FROM jobs WHERE account_id = ? AND pool = ?
			AND status = 'queued' ORDER BY turn, created_at, id LIMIT 1`, account, pool).Scan(&h.id, &h.turn, &h.created)
		if errors.Is(err, sql.ErrNoRows) {
			continue // queued work in other pools only
		}
		if err != nil {
			return "", fmt.Errorf("embedded: claim job: %w", err)
		}
		if best == nil || h.turn < best.turn || (h.turn == best.turn &&
			(h.created < best.created || (h.created == best.created && h.id < best.id))) {
			best = &h
		}
	}
	if best == nil {
		return "", storage.ErrNotFound
	}
	return best.id, nil
}

// dropEarlierOutputs deletes every output of job id (a new attempt has none
// yet) with its asset, releasing each asset's blob reference. It returns
// the hashes of the blobs left without one, whose bytes go after the
// commit.
func dropEarlierOutputs(ctx context.Context, tx *sql.Tx, id string) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT a.id, a.hash FROM job_outputs o
		JOIN assets a ON a.id = o.asset_id WHERE o.job_id = ? ORDER BY o.seq`, id)
	if err != nil {
		return nil, fmt.Errorf("embedded: read earlier outputs: %w", err)
	}
	type ref struct{ asset, hash string }
	var refs []ref
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.asset, &r.hash); err != nil {
			_ = rows.Close()
			return nil, fmt.Errorf("embedded: read earlier outputs: %w", err)
		}
		refs = append(refs, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("embedded: read earlier outputs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_outputs WHERE job_id = ?`, id); err != nil {
		return nil, fmt.Errorf("embedded: delete earlier outputs: %w", err)
	}
	var unreferenced []string
	for _, r := range refs {
		if _, err := tx.ExecContext(ctx, `DELETE FROM assets WHERE id = ?`, r.asset); err != nil {
			return nil, fmt.Errorf("embedded: delete earlier output asset: %w", err)
		}
		last, err := releaseBlob(ctx, tx, r.hash)
		if err != nil {
			return nil, err
		}
		if last {
			unreferenced = append(unreferenced, r.hash)
		}
	}
	return unreferenced, nil
}

// RenewLease extends the attempt's lease to now+lease and returns the job's
// status, or storage.ErrLeaseLost.
func (s *Store) RenewLease(ctx context.Context, id string, attempt int, lease time.Duration) (string, error) {
	var status string
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `UPDATE jobs SET lease_expires_at = ? WHERE `+ownsLease+` RETURNING status`,
			formatTime(now().Add(lease)), id, attempt).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrLeaseLost
		}
		if err != nil {
			return fmt.Errorf("embedded: renew lease: %w", err)
		}
		return nil
	})
	return status, err
}

// SetProgress replaces the attempt's progress snapshot (nil clears it).
func (s *Store) SetProgress(ctx context.Context, id string, attempt int, progress json.RawMessage) error {
	if len(progress) > 0 && !storage.ValidJSON(progress) {
		return errors.New("embedded: SetProgress needs valid JSON")
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET progress = ? WHERE `+ownsLease,
			nullJSON(progress), id, attempt)
		if err != nil {
			return fmt.Errorf("embedded: set progress: %w", err)
		}
		return leaseHeld(res)
	})
}

// leaseHeld turns "no row updated" into storage.ErrLeaseLost.
func leaseHeld(res sql.Result) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("embedded: rows affected: %w", err)
	}
	if n == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}

// AddOutput creates the output's asset (the job's account, JobID set) over
// its blob with publish called while the write transaction holds the blob's
// record, and appends the output with the next seq; all or nothing.
func (s *Store) AddOutput(ctx context.Context, id string, attempt int, out storage.NewOutput, publish storage.Publisher) (storage.Output, error) {
	a := out.Asset
	if a.ID == "" || a.Hash == "" {
		return storage.Output{}, errors.New("embedded: AddOutput needs an asset ID and Hash")
	}
	if publish == nil {
		return storage.Output{}, errors.New("embedded: AddOutput needs a publisher")
	}
	result := storage.Output{NodeID: out.NodeID, Name: out.Name, Type: out.Type, Folder: out.Folder}
	tracked := storage.Track(publish)
	var rolledBack bool
	err := s.inWriteTx(ctx, func(tx *sql.Tx) (err error) {
		defer func() { rolledBack = err != nil }()
		err = tx.QueryRowContext(ctx, `SELECT account_id, coalesce(deployment_id, '') FROM jobs WHERE `+ownsLease,
			id, attempt).Scan(&a.AccountID, &a.DeploymentID)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrLeaseLost
		}
		if err != nil {
			return fmt.Errorf("embedded: add output: %w", err)
		}
		a.JobID = id
		created, err := createAssetTx(ctx, tx, a, tracked)
		if err != nil {
			return err
		}
		result.Asset = created.Asset
		_, err = tx.ExecContext(ctx, `INSERT INTO job_outputs (job_id, attempt, seq, node_id, name, type, asset_id, folder_type)
			VALUES (?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM job_outputs WHERE job_id = ?), ?, ?, ?, ?, nullif(?, ''))`,
			id, attempt, id, out.NodeID, out.Name, out.Type, a.ID, out.Folder)
		if err != nil {
			return fmt.Errorf("embedded: insert output: %w", err)
		}
		return nil
	})
	if err != nil {
		tracked.Failed(err, rolledBack)
		return storage.Output{}, err
	}
	return result, nil
}

// FinishJob ends the attempt with status (succeeded, failed or canceled;
// canceled whatever status says once the job is canceling), keeping jobErr
// only for failed, sets CompletedAt, drops the lease and, in
// the same transaction, settles a priced job (not charged when jobErr names
// a platform fault).
func (s *Store) FinishJob(ctx context.Context, id string, attempt int, status string, jobErr json.RawMessage) (storage.Job, error) {
	if err := checkFinish(status, jobErr); err != nil {
		return storage.Job{}, err
	}
	if status != storage.JobFailed {
		jobErr = nil
	}
	var job storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		// A canceling job ends canceled however its attempt ended: the
		// contract has canceling lead only there.
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = CASE WHEN status = 'canceling' THEN 'canceled' ELSE ? END,
				error = CASE WHEN status = 'canceling' THEN NULL ELSE ? END, completed_at = ?,
				lease_owner = NULL, lease_expires_at = NULL
			WHERE `+ownsLease, status, nullJSON(jobErr), formatTime(now()), id, attempt)
		if err != nil {
			return fmt.Errorf("embedded: finish job: %w", err)
		}
		if err := leaseHeld(res); err != nil {
			return err
		}
		if job, err = loadJob(ctx, tx, `id = ?`, id); err != nil {
			return err
		}
		job, err = settleJob(ctx, tx, job, status == storage.JobFailed && storage.PlatformFault(jobErr))
		return err
	})
	return job, err
}

// checkFinish refuses a status FinishJob cannot end an attempt with, or an
// error object that is not JSON.
func checkFinish(status string, jobErr json.RawMessage) error {
	switch status {
	case storage.JobSucceeded, storage.JobFailed, storage.JobCanceled:
	default:
		return fmt.Errorf("embedded: FinishJob: status %q is not succeeded, failed or canceled", status)
	}
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return errors.New("embedded: FinishJob: error object is not valid JSON")
	}
	return nil
}

// ReclaimExpired ends every attempt whose lease ran out before now: a
// canceling job becomes canceled; a running one is queued again (its Attempt
// unchanged until the next claim) or, once it has had maxAttempts attempts
// (at least 1), failed with jobErr. Terminal jobs get CompletedAt = now. The
// changed jobs are returned oldest first, without outputs.
func (s *Store) ReclaimExpired(ctx context.Context, now time.Time, maxAttempts int, jobErr json.RawMessage) ([]storage.Job, error) {
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return nil, errors.New("embedded: ReclaimExpired: error object is not valid JSON")
	}
	maxAttempts = max(maxAttempts, 1)
	t := formatTime(now)
	var jobs []storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		jobs, err = queryJobs(ctx, tx, `UPDATE jobs SET `+handBack+`
			WHERE status IN ('running', 'canceling') AND lease_expires_at < ?
			RETURNING `+jobColumns,
			maxAttempts, maxAttempts, nullJSON(jobErr), maxAttempts, t, maxAttempts, maxAttempts, t)
		if err != nil {
			return err
		}
		return settleHandedBack(ctx, tx, jobs)
	})
	storage.SortJobs(jobs)
	return jobs, err
}

// ExpireJobs marks expired up to limit jobs: non-terminal ones whose
// ExpiresAt is before now, and running ones started before runningBefore.
// CompletedAt is set to now and any lease dropped. Returned oldest first,
// without outputs. The two reasons are picked apart, each in its index's
// order up to limit (see the postgres store), so a batch's cost does not
// grow with the number of jobs due. Every expireChunk jobs commit in a
// write transaction of their own; on an error the jobs of the chunks
// before it are returned with it.
func (s *Store) ExpireJobs(ctx context.Context, now, runningBefore time.Time, limit int) ([]storage.Job, error) {
	t := formatTime(now)
	var jobs []storage.Job
	var err error
	for limit > 0 {
		n := min(limit, expireChunk)
		var chunk []storage.Job
		err = s.inWriteTx(ctx, func(tx *sql.Tx) error {
			var err error
			chunk, err = queryJobs(ctx, tx, `UPDATE jobs SET status = 'expired', completed_at = ?,
					lease_owner = NULL, lease_expires_at = NULL
				WHERE id IN (SELECT id FROM (SELECT id FROM jobs
						WHERE status IN ('queued', 'running', 'canceling') AND expires_at < ? ORDER BY expires_at LIMIT ?)
					UNION
					SELECT id FROM (SELECT id FROM jobs WHERE status = 'running' AND started_at < ?
						ORDER BY started_at LIMIT ?)
					LIMIT ?)
				RETURNING `+jobColumns, t, t, n, formatTime(runningBefore), n, n)
			if err != nil {
				return err
			}
			for i, j := range chunk {
				if chunk[i], err = settleJob(ctx, tx, j, false); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			break // the chunks before it are expired: the caller announces them
		}
		jobs = append(jobs, chunk...)
		if len(chunk) < n {
			break
		}
		limit -= n
	}
	storage.SortJobs(jobs)
	return jobs, err
}

// expireChunk is how many jobs ExpireJobs expires in one write
// transaction. Every submission waits for the single writer; a 500-job
// transaction held it for 450–770 ms on a 200k-job store (BENCHMARKS.md,
// "Scale"), long enough to more than double submit p99 while the reaper
// ran.
const expireChunk = 100

// handBack is the SET clause that takes a job from an attempt that is gone:
// canceling ends canceled, running goes back to the queue (at the front:
// its turn is at most the queue's front turn, so with its older created_at
// it keeps its place; its attempt's start forgotten) or, at the last
// attempt, fails. Its parameters are maxAttempts, maxAttempts, the error
// object, maxAttempts, the completion time, maxAttempts and maxAttempts.
const handBack = `status = CASE WHEN status = 'canceling' THEN 'canceled'
		WHEN attempt >= ? THEN 'failed' ELSE 'queued' END,
	error = CASE WHEN status = 'running' AND attempt >= ? THEN ? ELSE error END,
	completed_at = CASE WHEN status = 'canceling' OR attempt >= ? THEN ? ELSE NULL END,
	lease_owner = NULL, lease_expires_at = NULL,
	attempt_started_at = CASE WHEN status = 'running' AND attempt < ? THEN NULL ELSE attempt_started_at END,
	turn = CASE WHEN status = 'running' AND attempt < ? THEN min(turn,
		coalesce((SELECT min(q.turn) FROM jobs q WHERE q.pool = jobs.pool AND q.status = 'queued'), turn))
		ELSE turn END`

// settleHandedBack settles the jobs a hand-back ended: a canceled one is
// charged for the time it ran, a failed one (its worker lost: a platform
// fault) is not.
func settleHandedBack(ctx context.Context, tx *sql.Tx, jobs []storage.Job) error {
	for i, j := range jobs {
		var err error
		if jobs[i], err = settleJob(ctx, tx, j, j.Status == storage.JobFailed); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseJob implements storage.JobStore.
func (s *Store) ReleaseJob(ctx context.Context, id string, attempt, maxAttempts int, jobErr json.RawMessage) (storage.Job, error) {
	if len(jobErr) > 0 && !storage.ValidJSON(jobErr) {
		return storage.Job{}, errors.New("embedded: ReleaseJob: error object is not valid JSON")
	}
	maxAttempts = max(maxAttempts, 1)
	t := formatTime(now())
	var jobs []storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		jobs, err = queryJobs(ctx, tx, `UPDATE jobs SET `+handBack+`
			WHERE `+ownsLease+`
			RETURNING `+jobColumns,
			maxAttempts, maxAttempts, nullJSON(jobErr), maxAttempts, t, maxAttempts, maxAttempts, id, attempt)
		if err != nil {
			return err
		}
		return settleHandedBack(ctx, tx, jobs)
	})
	if err != nil {
		return storage.Job{}, err
	}
	if len(jobs) == 0 {
		return storage.Job{}, storage.ErrLeaseLost
	}
	return jobs[0], nil
}
