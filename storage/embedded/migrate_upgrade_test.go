package embedded

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
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

// TestBlobObjectsMigrationIsExpandOnly: rows written before 0010 read back
// as objects at their address, and the previous release's blob statements
// (storage/embedded at 4bd1ca3, word for word) work beside this release's
// code on the migrated file: 0010 only adds.
func TestBlobObjectsMigrationIsExpandOnly(t *testing.T) {
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
	const (
		oldReference = `INSERT INTO blobs (hash, size, refs) VALUES (?, ?, 1)
		ON CONFLICT (hash) DO UPDATE SET refs = refs + 1`
		oldInsertAsset = `INSERT INTO assets (id, account_id, hash, size_bytes, content_type, file_path, tags, created_at)
		VALUES (?, ?, ?, 3, 'image/png', 'x.png', '[]', ?)`
		oldRelease = `UPDATE blobs SET refs = refs - 1 WHERE hash = ? RETURNING refs`
		oldDelete  = `DELETE FROM blobs WHERE hash = ?`
		oldNamed   = `SELECT EXISTS (SELECT 1 FROM blobs WHERE hash = ?)`
	)
	oldCreate := func(account, hash string) string {
		t.Helper()
		id := uuid.NewString()
		if err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, oldReference, hash, 3); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, oldInsertAsset, id, account, hash, formatTime(now()))
			return err
		}); err != nil {
			t.Fatalf("the previous release's create: %v", err)
		}
		return id
	}
	if err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY,
			name TEXT NOT NULL, applied_at TEXT NOT NULL)`); err != nil {
			return err
		}
		for _, m := range all[:9] {
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
		t.Fatalf("migrating to 0009: %v", err)
	}
	legacy := oldCreate("acme", "blake3:before")
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if a, err := s.GetAsset(ctx, "acme", legacy); err != nil || a.Object() != (blob.Ref{Hash: "blake3:before"}) {
		t.Fatalf("a row written before 0010 = %+v, %v; want its object at its address", a, err)
	}
	keyed := storage.PublishFunc(func(*blob.Ref) (blob.Ref, error) { return blob.Ref{Hash: "blake3:keyed", Key: "blobs/k1"}, nil })
	created, err := s.CreateAsset(ctx, storage.NewAsset{ID: uuid.NewString(), AccountID: "acme", Hash: "blake3:keyed",
		SizeBytes: 3, ContentType: "image/png", FilePath: "k.png"}, keyed)
	if err != nil || created.Asset.ObjectKey != "blobs/k1" {
		t.Fatalf("a keyed create = %+v, %v", created, err)
	}
	overKeyed := oldCreate("other", "blake3:keyed")
	if a, err := s.GetAsset(ctx, "other", overKeyed); err != nil || a.ObjectKey != "blobs/k1" {
		t.Errorf("the previous release's create over a keyed blob = %+v, %v; want the key kept", a, err)
	}
	var named bool
	if err := s.read.QueryRowContext(ctx, oldNamed, "blake3:keyed").Scan(&named); err != nil || !named {
		t.Errorf("the previous release's orphan look-up: %v, %v", named, err)
	}
	if err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var refs int
		if err := tx.QueryRowContext(ctx, oldRelease, "blake3:keyed").Scan(&refs); err != nil || refs != 1 {
			return fmt.Errorf("release: %d, %w", refs, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM assets WHERE id = ?`, overKeyed); err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, oldRelease, "blake3:before").Scan(&refs); err != nil || refs != 0 {
			return fmt.Errorf("last release: %d, %w", refs, err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM assets WHERE id = ?`, legacy); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, oldDelete, "blake3:before")
		return err
	}); err != nil {
		t.Fatalf("the previous release's deletes: %v", err)
	}
	var removed []blob.Ref
	if err := s.DeleteAsset(ctx, "acme", created.Asset.ID, func(obj blob.Ref) error { removed = append(removed, obj); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != (blob.Ref{Hash: "blake3:keyed", Key: "blobs/k1"}) {
		t.Errorf("the last delete removed %v, want the keyed object", removed)
	}
}
