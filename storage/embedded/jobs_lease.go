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

// ClaimJob leases the pool's oldest queued job (created_at, then id) to owner
// for a new attempt. In the same write transaction it deletes the outputs of
// earlier attempts and their assets, calling remove for blobs left without a
// reference, and clears the earlier attempt's progress. The single writer
// makes concurrent claimers take distinct jobs. Leases run on this process's
// clock.
func (s *Store) ClaimJob(ctx context.Context, pool, owner string, lease time.Duration, remove storage.BlobFunc) (storage.Job, error) {
	if remove == nil {
		return storage.Job{}, errors.New("embedded: ClaimJob needs a remove func")
	}
	var job storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var id string
		err := tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE pool = ? AND status = 'queued'
			ORDER BY created_at, id LIMIT 1`, pool).Scan(&id)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("embedded: claim job: %w", err)
		}
		t := now()
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 'running', attempt = attempt + 1,
				lease_owner = ?, lease_expires_at = ?, started_at = coalesce(started_at, ?), progress = NULL
			WHERE id = ?`, owner, formatTime(t.Add(lease)), formatTime(t), id); err != nil {
			return fmt.Errorf("embedded: claim job: %w", err)
		}
		if err := dropEarlierOutputs(ctx, tx, id, remove); err != nil {
			return err
		}
		job, err = loadJob(ctx, tx, `id = ?`, id)
		return err
	})
	return job, err
}

// dropEarlierOutputs deletes every output of job id (a new attempt has none
// yet) with its asset, releasing each asset's blob reference.
func dropEarlierOutputs(ctx context.Context, tx *sql.Tx, id string, remove storage.BlobFunc) error {
	rows, err := tx.QueryContext(ctx, `SELECT a.id, a.hash FROM job_outputs o
		JOIN assets a ON a.id = o.asset_id WHERE o.job_id = ? ORDER BY o.seq`, id)
	if err != nil {
		return fmt.Errorf("embedded: read earlier outputs: %w", err)
	}
	type ref struct{ asset, hash string }
	var refs []ref
	for rows.Next() {
		var r ref
		if err := rows.Scan(&r.asset, &r.hash); err != nil {
			_ = rows.Close()
			return fmt.Errorf("embedded: read earlier outputs: %w", err)
		}
		refs = append(refs, r)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("embedded: read earlier outputs: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM job_outputs WHERE job_id = ?`, id); err != nil {
		return fmt.Errorf("embedded: delete earlier outputs: %w", err)
	}
	for _, r := range refs {
		if _, err := tx.ExecContext(ctx, `DELETE FROM assets WHERE id = ?`, r.asset); err != nil {
			return fmt.Errorf("embedded: delete earlier output asset: %w", err)
		}
		if err := releaseBlob(ctx, tx, r.hash, remove); err != nil {
			return err
		}
	}
	return nil
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
func (s *Store) AddOutput(ctx context.Context, id string, attempt int, out storage.NewOutput, publish storage.BlobFunc) (storage.Output, error) {
	a := out.Asset
	if a.ID == "" || a.Hash == "" {
		return storage.Output{}, errors.New("embedded: AddOutput needs an asset ID and Hash")
	}
	if publish == nil {
		return storage.Output{}, errors.New("embedded: AddOutput needs a publish func")
	}
	result := storage.Output{NodeID: out.NodeID, Name: out.Name, Type: out.Type}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT account_id, coalesce(deployment_id, '') FROM jobs WHERE `+ownsLease,
			id, attempt).Scan(&a.AccountID, &a.DeploymentID)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrLeaseLost
		}
		if err != nil {
			return fmt.Errorf("embedded: add output: %w", err)
		}
		a.JobID = id
		created, err := createAssetTx(ctx, tx, a, publish)
		if err != nil {
			return err
		}
		result.Asset = created.Asset
		_, err = tx.ExecContext(ctx, `INSERT INTO job_outputs (job_id, attempt, seq, node_id, name, type, asset_id)
			VALUES (?, ?, (SELECT coalesce(max(seq), 0) + 1 FROM job_outputs WHERE job_id = ?), ?, ?, ?, ?)`,
			id, attempt, id, out.NodeID, out.Name, out.Type, a.ID)
		if err != nil {
			return fmt.Errorf("embedded: insert output: %w", err)
		}
		return nil
	})
	if err != nil {
		return storage.Output{}, err
	}
	return result, nil
}

// FinishJob ends the attempt with status (succeeded, failed or canceled),
// keeping jobErr only for failed, sets CompletedAt and drops the lease.
func (s *Store) FinishJob(ctx context.Context, id string, attempt int, status string, jobErr json.RawMessage) (storage.Job, error) {
	if err := checkFinish(status, jobErr); err != nil {
		return storage.Job{}, err
	}
	if status != storage.JobFailed {
		jobErr = nil
	}
	var job storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE jobs SET status = ?, error = ?, completed_at = ?,
				lease_owner = NULL, lease_expires_at = NULL
			WHERE `+ownsLease, status, nullJSON(jobErr), formatTime(now()), id, attempt)
		if err != nil {
			return fmt.Errorf("embedded: finish job: %w", err)
		}
		if err := leaseHeld(res); err != nil {
			return err
		}
		job, err = loadJob(ctx, tx, `id = ?`, id)
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
			maxAttempts, maxAttempts, nullJSON(jobErr), maxAttempts, t, t)
		return err
	})
	storage.SortJobs(jobs)
	return jobs, err
}

// ExpireJobs marks expired up to limit jobs: non-terminal ones whose
// ExpiresAt is before now, and running ones started before runningBefore.
// CompletedAt is set to now and any lease dropped. Returned oldest first,
// without outputs.
func (s *Store) ExpireJobs(ctx context.Context, now, runningBefore time.Time, limit int) ([]storage.Job, error) {
	if limit <= 0 {
		return nil, nil
	}
	t := formatTime(now)
	var jobs []storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		jobs, err = queryJobs(ctx, tx, `UPDATE jobs SET status = 'expired', completed_at = ?,
				lease_owner = NULL, lease_expires_at = NULL
			WHERE id IN (SELECT id FROM jobs
				WHERE (status IN ('queued', 'running', 'canceling') AND expires_at < ?)
					OR (status = 'running' AND started_at < ?)
				ORDER BY created_at, id LIMIT ?)
			RETURNING `+jobColumns, t, t, formatTime(runningBefore), limit)
		return err
	})
	storage.SortJobs(jobs)
	return jobs, err
}

// handBack is the SET clause that takes a job from an attempt that is gone:
// canceling ends canceled, running goes back to the queue or, at the last
// attempt, fails. Its parameters are maxAttempts, maxAttempts, the error
// object, maxAttempts and the completion time.
const handBack = `status = CASE WHEN status = 'canceling' THEN 'canceled'
		WHEN attempt >= ? THEN 'failed' ELSE 'queued' END,
	error = CASE WHEN status = 'running' AND attempt >= ? THEN ? ELSE error END,
	completed_at = CASE WHEN status = 'canceling' OR attempt >= ? THEN ? ELSE NULL END,
	lease_owner = NULL, lease_expires_at = NULL`

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
			maxAttempts, maxAttempts, nullJSON(jobErr), maxAttempts, t, id, attempt)
		return err
	})
	if err != nil {
		return storage.Job{}, err
	}
	if len(jobs) == 0 {
		return storage.Job{}, storage.ErrLeaseLost
	}
	return jobs[0], nil
}
