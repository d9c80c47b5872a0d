package embedded

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
)

// TestUpgradeToDeployments writes rows the way the schema before 0005 held
// them, then migrates to the end: they read back unchanged (no deployment,
// no run log) and the new features work on them.
func TestUpgradeToDeployments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	all, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
			name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
			return err
		}
		for _, m := range all[:4] {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations VALUES (?, ?, ?)`,
				m.version, m.name, formatTime(now())); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("migrating to 0004: %v", err)
	}
	account, jobID, assetID, hash := "acme", uuid.NewString(), uuid.NewString(), "blake3:"+uuid.NewString()
	ts, later := formatTime(now()), formatTime(now().Add(time.Hour))
	if err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		for _, q := range []struct {
			sql  string
			args []any
		}{
			{`INSERT INTO blobs (hash, size, refs) VALUES (?, 3, 1)`, []any{hash}},
			{`INSERT INTO jobs (id, account_id, pool, status, workflow, created_at, expires_at, attempt)
				VALUES (?, ?, 'builtin', 'succeeded', '{}', ?, ?, 1)`, []any{jobID, account, ts, later}},
			{`INSERT INTO assets (id, account_id, hash, size_bytes, content_type, file_path, job_id, created_at, expires_at)
				VALUES (?, ?, ?, 3, 'image/png', 'x.png', ?, ?, ?)`, []any{assetID, account, hash, jobID, ts, later}},
			{`INSERT INTO job_outputs (job_id, attempt, seq, node_id, name, type, asset_id)
				VALUES (?, 1, 1, '3', 'x.png', 'image', ?)`, []any{jobID, assetID}},
		} {
			if _, err := tx.ExecContext(ctx, q.sql, q.args...); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("writing old rows: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	job, err := s.GetJob(ctx, account, jobID)
	if err != nil {
		t.Fatalf("GetJob of an old job: %v", err)
	}
	if job.DeploymentID != "" || len(job.Outputs) != 1 || job.Outputs[0].Asset.DeploymentID != "" {
		t.Errorf("old job after the upgrade = %+v", job)
	}
	if _, ok, err := s.GetJobLog(ctx, account, jobID); err != nil || ok {
		t.Errorf("GetJobLog of an old job = ok %v, %v; want none", ok, err)
	}
	if n, err := s.DeleteExpiredJobs(ctx, now().Add(2*time.Hour), 10); err != nil || n != 1 {
		t.Errorf("DeleteExpiredJobs of the old job = %d, %v", n, err)
	}
	if _, err := s.CreateDeployment(ctx, storage.Deployment{ID: "acme-1", AccountID: account, Pool: "builtin",
		State: storage.DeploymentProvisioning}); err != nil {
		t.Errorf("CreateDeployment after the upgrade: %v", err)
	}
}
