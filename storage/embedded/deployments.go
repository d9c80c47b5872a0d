package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.DeploymentStore = (*Store)(nil)

const deploymentColumns = `id, account_id, pool, public, state, created_at, updated_at`

func scanDeployment(row scanner) (storage.Deployment, error) {
	var (
		d                    storage.Deployment
		createdAt, updatedAt string
	)
	if err := row.Scan(&d.ID, &d.AccountID, &d.Pool, &d.Public, &d.State, &createdAt, &updatedAt); err != nil {
		return storage.Deployment{}, err
	}
	var err error
	if d.CreatedAt, err = parseTime(createdAt); err != nil {
		return storage.Deployment{}, err
	}
	if d.UpdatedAt, err = parseTime(updatedAt); err != nil {
		return storage.Deployment{}, err
	}
	return d, nil
}

func getDeployment(ctx context.Context, q querier, id string) (storage.Deployment, error) {
	d, err := scanDeployment(q.QueryRowContext(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.Deployment{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.Deployment{}, fmt.Errorf("embedded: read deployment: %w", err)
	}
	return d, nil
}

// CreateDeployment records d with the store's clock.
func (s *Store) CreateDeployment(ctx context.Context, d storage.Deployment) (storage.Deployment, error) {
	if err := storage.CheckDeployment(d); err != nil {
		return storage.Deployment{}, err
	}
	d.CreatedAt = now()
	d.UpdatedAt = d.CreatedAt
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO deployments (`+deploymentColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			d.ID, d.AccountID, d.Pool, d.Public, d.State, formatTime(d.CreatedAt), formatTime(d.UpdatedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("embedded: insert deployment: %w", storage.ErrDuplicate)
		}
		if err != nil {
			return fmt.Errorf("embedded: insert deployment: %w", err)
		}
		return nil
	})
	if err != nil {
		return storage.Deployment{}, err
	}
	return d, nil
}

// GetDeployment returns the deployment; a malformed id is ErrNotFound.
func (s *Store) GetDeployment(ctx context.Context, id string) (storage.Deployment, error) {
	if !storage.ValidDeploymentID(id) {
		return storage.Deployment{}, storage.ErrNotFound
	}
	return getDeployment(ctx, s.read, id)
}

// ListDeployments lists the account's deployments (all when accountID is
// empty), oldest first.
func (s *Store) ListDeployments(ctx context.Context, accountID string) ([]storage.Deployment, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+deploymentColumns+` FROM deployments
		WHERE ? = '' OR account_id = ? ORDER BY created_at, id`, accountID, accountID)
	if err != nil {
		return nil, fmt.Errorf("embedded: list deployments: %w", err)
	}
	defer rows.Close()
	out := []storage.Deployment{}
	for rows.Next() {
		d, err := scanDeployment(rows)
		if err != nil {
			return nil, fmt.Errorf("embedded: list deployments: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: list deployments: %w", err)
	}
	return out, nil
}

// SetDeploymentState changes the state unless the deployment is stopped;
// stopping a stopped deployment changes nothing.
func (s *Store) SetDeploymentState(ctx context.Context, id, state string) (storage.Deployment, error) {
	if !storage.ValidDeploymentState(state) {
		return storage.Deployment{}, fmt.Errorf("embedded: unknown deployment state %q", state)
	}
	if !storage.ValidDeploymentID(id) {
		return storage.Deployment{}, storage.ErrNotFound
	}
	var d storage.Deployment
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		if d, err = getDeployment(ctx, tx, id); err != nil {
			return err
		}
		if d.State == storage.DeploymentStopped {
			if state == storage.DeploymentStopped {
				return nil
			}
			return storage.ErrDeploymentStopped
		}
		d.State, d.UpdatedAt = state, now()
		if _, err := tx.ExecContext(ctx, `UPDATE deployments SET state = ?, updated_at = ? WHERE id = ?`,
			state, formatTime(d.UpdatedAt), id); err != nil {
			return fmt.Errorf("embedded: set deployment state: %w", err)
		}
		return nil
	})
	if err != nil {
		return storage.Deployment{}, err
	}
	return d, nil
}

// DeleteDeployment removes the record.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM deployments WHERE id = ?`, id)
		if err != nil {
			return fmt.Errorf("embedded: delete deployment: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			if err != nil {
				return fmt.Errorf("embedded: delete deployment: %w", err)
			}
			return storage.ErrNotFound
		}
		return nil
	})
}

// CancelDeploymentJobs applies CancelJob's transitions to every open job of
// the deployment in one write transaction.
func (s *Store) CancelDeploymentJobs(ctx context.Context, deploymentID string) ([]storage.Job, error) {
	var jobs []storage.Job
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		jobs, err = queryJobs(ctx, tx, `SELECT `+jobColumns+` FROM jobs
			WHERE deployment_id = ? AND status IN ('queued', 'running')`, deploymentID)
		if err != nil || len(jobs) == 0 {
			return err
		}
		t := now()
		if _, err := tx.ExecContext(ctx, `UPDATE jobs SET
				status = CASE status WHEN 'queued' THEN 'canceled' ELSE 'canceling' END,
				completed_at = CASE status WHEN 'queued' THEN ? ELSE completed_at END
			WHERE deployment_id = ? AND status IN ('queued', 'running')`, formatTime(t), deploymentID); err != nil {
			return fmt.Errorf("embedded: cancel deployment jobs: %w", err)
		}
		for i := range jobs {
			if jobs[i].Status == storage.JobQueued {
				jobs[i].Status, jobs[i].CompletedAt = storage.JobCanceled, &t
				if jobs[i], err = settleJob(ctx, tx, jobs[i], false); err != nil { // a refund
					return err
				}
			} else {
				jobs[i].Status = storage.JobCanceling
			}
		}
		return nil
	})
	storage.SortJobs(jobs)
	return jobs, err
}

// DeleteExpiredJobs deletes up to limit terminal jobs past their deadline;
// their output rows and run logs go with them (ON DELETE CASCADE).
func (s *Store) DeleteExpiredJobs(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	var n int64
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE id IN (SELECT id FROM jobs
			WHERE status IN ('succeeded', 'failed', 'canceled', 'expired') AND expires_at < ?
			ORDER BY expires_at LIMIT ?)`, formatTime(before), limit)
		if err != nil {
			return fmt.Errorf("embedded: delete expired jobs: %w", err)
		}
		n, err = res.RowsAffected()
		return err
	})
	return int(n), err
}

// SetJobLog stores the attempt's run log while the attempt holds the job.
func (s *Store) SetJobLog(ctx context.Context, id string, attempt int, log storage.JobLog) error {
	if !storage.ValidJobLog(log) {
		return errors.New("embedded: set job log: not valid UTF-8 text of at most MaxJobLogBytes")
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO job_logs (job_id, text, truncated, captured_at)
			SELECT id, ?, ?, ? FROM jobs WHERE `+ownsLease+`
			ON CONFLICT (job_id) DO UPDATE SET text = excluded.text, truncated = excluded.truncated,
				captured_at = excluded.captured_at`,
			log.Text, log.Truncated, formatTime(log.CapturedAt), id, attempt)
		if err != nil {
			return fmt.Errorf("embedded: set job log: %w", err)
		}
		return leaseHeld(res)
	})
}

// GetJobLog returns the run log of the account's job.
func (s *Store) GetJobLog(ctx context.Context, accountID, id string) (storage.JobLog, bool, error) {
	var (
		text, capturedAt sql.NullString
		truncated        sql.NullBool
	)
	err := s.read.QueryRowContext(ctx, `SELECT l.text, l.truncated, l.captured_at
		FROM jobs j LEFT JOIN job_logs l ON l.job_id = j.id WHERE j.id = ? AND j.account_id = ?`,
		id, accountID).Scan(&text, &truncated, &capturedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.JobLog{}, false, storage.ErrNotFound
	}
	if err != nil {
		return storage.JobLog{}, false, fmt.Errorf("embedded: get job log: %w", err)
	}
	if !text.Valid {
		return storage.JobLog{}, false, nil
	}
	at, err := parseTime(capturedAt.String)
	if err != nil {
		return storage.JobLog{}, false, err
	}
	return storage.JobLog{Text: text.String, Truncated: truncated.Bool, CapturedAt: at}, true, nil
}
