package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.DeploymentStore = (*Store)(nil)

const deploymentColumns = `id, account_id, pool, public, state, created_at, updated_at`

func scanDeployment(row pgx.Row) (storage.Deployment, error) {
	var d storage.Deployment
	if err := row.Scan(&d.ID, &d.AccountID, &d.Pool, &d.Public, &d.State, &d.CreatedAt, &d.UpdatedAt); err != nil {
		return storage.Deployment{}, err
	}
	d.CreatedAt, d.UpdatedAt = d.CreatedAt.UTC(), d.UpdatedAt.UTC()
	return d, nil
}

// CreateDeployment records d with the database clock's times.
func (s *Store) CreateDeployment(ctx context.Context, d storage.Deployment) (storage.Deployment, error) {
	if err := storage.CheckDeployment(d); err != nil {
		return storage.Deployment{}, err
	}
	got, err := scanDeployment(s.pool.QueryRow(ctx, `INSERT INTO deployments (id, account_id, pool, public, state)
		VALUES ($1, $2, $3, $4, $5) RETURNING `+deploymentColumns, d.ID, d.AccountID, d.Pool, d.Public, d.State))
	if err != nil {
		return storage.Deployment{}, mapErr("create deployment", err)
	}
	return got, nil
}

// GetDeployment returns the deployment; a malformed id is ErrNotFound.
func (s *Store) GetDeployment(ctx context.Context, id string) (storage.Deployment, error) {
	if !storage.ValidDeploymentID(id) {
		return storage.Deployment{}, fmt.Errorf("postgres: get deployment: %w", storage.ErrNotFound)
	}
	d, err := scanDeployment(s.pool.QueryRow(ctx, `SELECT `+deploymentColumns+` FROM deployments WHERE id = $1`, id))
	if err != nil {
		return storage.Deployment{}, mapErr("get deployment", err)
	}
	return d, nil
}

// ListDeployments lists the account's deployments (all when accountID is
// empty), oldest first.
func (s *Store) ListDeployments(ctx context.Context, accountID string) ([]storage.Deployment, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+deploymentColumns+` FROM deployments
		WHERE $1 = '' OR account_id = $1 ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, mapErr("list deployments", err)
	}
	defer rows.Close()
	out := []storage.Deployment{}
	for rows.Next() {
		d, err := scanDeployment(rows)
		if err != nil {
			return nil, mapErr("list deployments", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("list deployments", err)
	}
	return out, nil
}

// SetDeploymentState changes the state unless the deployment is stopped;
// stopping a stopped deployment changes nothing.
func (s *Store) SetDeploymentState(ctx context.Context, id, state string) (storage.Deployment, error) {
	if !storage.ValidDeploymentState(state) {
		return storage.Deployment{}, fmt.Errorf("postgres: unknown deployment state %q", state)
	}
	if !storage.ValidDeploymentID(id) {
		return storage.Deployment{}, fmt.Errorf("postgres: set deployment state: %w", storage.ErrNotFound)
	}
	d, err := scanDeployment(s.pool.QueryRow(ctx, `UPDATE deployments SET state = $2, updated_at = now()
		WHERE id = $1 AND state <> 'stopped' RETURNING `+deploymentColumns, id, state))
	if errors.Is(err, pgx.ErrNoRows) {
		cur, gerr := s.GetDeployment(ctx, id)
		switch {
		case gerr != nil:
			return storage.Deployment{}, gerr
		case cur.State == storage.DeploymentStopped && state == storage.DeploymentStopped:
			return cur, nil
		case cur.State == storage.DeploymentStopped:
			return storage.Deployment{}, fmt.Errorf("postgres: set deployment state: %w", storage.ErrDeploymentStopped)
		}
		// Changed between the two statements; only a stop can intervene.
		return storage.Deployment{}, fmt.Errorf("postgres: set deployment state: %w", storage.ErrDeploymentStopped)
	}
	if err != nil {
		return storage.Deployment{}, mapErr("set deployment state", err)
	}
	return d, nil
}

// DeleteDeployment removes the record.
func (s *Store) DeleteDeployment(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM deployments WHERE id = $1`, id)
	if err != nil {
		return mapErr("delete deployment", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: delete deployment: %w", storage.ErrNotFound)
	}
	return nil
}

// CancelDeploymentJobs applies CancelJob's transitions to every open job of
// the deployment in one statement.
func (s *Store) CancelDeploymentJobs(ctx context.Context, deploymentID string) ([]storage.Job, error) {
	// Queued jobs end here: settling refunds the priced ones (see CancelJob).
	const canceled = `CASE status WHEN 'queued' THEN 'canceled' ELSE 'canceling' END`
	jobs, err := queryJobs(ctx, s.pool, settling(`UPDATE jobs SET status = `+canceled+`,
			completed_at = CASE status WHEN 'queued' THEN now() ELSE completed_at END,
			`+chargeSet(canceled, `now()`, `false`)+`
		WHERE deployment_id = $1 AND status IN ('queued', 'running')`), deploymentID)
	if err != nil {
		return nil, fmt.Errorf("postgres: cancel deployment jobs: %w", err)
	}
	storage.SortJobs(jobs)
	return jobs, nil
}

// DeleteExpiredJobs deletes up to limit terminal jobs past their deadline;
// their output rows and run logs go with them (ON DELETE CASCADE).
func (s *Store) DeleteExpiredJobs(ctx context.Context, before time.Time, limit int) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	// A materialized CTE picks the rows once (see ExpireJobs).
	tag, err := s.pool.Exec(ctx, `WITH picked AS MATERIALIZED (SELECT id FROM jobs
			WHERE status IN ('succeeded', 'failed', 'canceled', 'expired') AND expires_at < $1
			ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)
		DELETE FROM jobs WHERE id IN (SELECT id FROM picked)`, before, limit)
	if err != nil {
		return 0, mapErr("delete expired jobs", err)
	}
	return int(tag.RowsAffected()), nil
}

// SetJobLog stores the attempt's run log while the attempt holds the job.
func (s *Store) SetJobLog(ctx context.Context, id string, attempt int, log storage.JobLog) error {
	if !storage.ValidJobLog(log) {
		return errors.New("postgres: set job log: not valid UTF-8 text of at most MaxJobLogBytes")
	}
	if !isUUID(id) {
		return storage.ErrLeaseLost
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO job_logs (job_id, text, truncated, captured_at)
		SELECT id, $3, $4, $5 FROM jobs WHERE `+ownsLease+`
		ON CONFLICT (job_id) DO UPDATE SET text = EXCLUDED.text, truncated = EXCLUDED.truncated,
			captured_at = EXCLUDED.captured_at`, id, attempt, log.Text, log.Truncated, log.CapturedAt)
	if err != nil {
		return mapErr("set job log", err)
	}
	if tag.RowsAffected() == 0 {
		return storage.ErrLeaseLost
	}
	return nil
}

// GetJobLog returns the run log of the account's job.
func (s *Store) GetJobLog(ctx context.Context, accountID, id string) (storage.JobLog, bool, error) {
	if !isUUID(id) {
		return storage.JobLog{}, false, fmt.Errorf("postgres: get job log: %w", storage.ErrNotFound)
	}
	var (
		text       *string
		truncated  *bool
		capturedAt *time.Time
	)
	err := s.pool.QueryRow(ctx, `SELECT l.text, l.truncated, l.captured_at
		FROM jobs j LEFT JOIN job_logs l ON l.job_id = j.id WHERE j.id = $1 AND j.account_id = $2`,
		id, accountID).Scan(&text, &truncated, &capturedAt)
	if err != nil {
		return storage.JobLog{}, false, mapErr("get job log", err)
	}
	if text == nil {
		return storage.JobLog{}, false, nil
	}
	return storage.JobLog{Text: *text, Truncated: *truncated, CapturedAt: capturedAt.UTC()}, true, nil
}
