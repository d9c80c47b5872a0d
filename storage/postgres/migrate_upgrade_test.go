package postgres

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/pgtest"
)

// TestUpgradeToDeployments applies the migrations before 0006 to a schema,
// writes a job with an output and an API key the way that schema held them,
// then migrates to the end: the old rows read back unchanged (no
// deployment, no run log) and the new features work on them.
func TestUpgradeToDeployments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	all, err := loadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var before []migration
	for _, m := range all {
		if m.version < 6 {
			before = append(before, m)
		}
	}
	if err := migrate(ctx, st.pool, before); err != nil {
		t.Fatalf("migrating to 0005: %v", err)
	}
	account, jobID, assetID := "acme", uuid.NewString(), uuid.NewString()
	hash := "blake3:" + "ab" + uuid.NewString()
	for _, q := range []string{
		`INSERT INTO blobs (hash, size, refs) VALUES ('` + hash + `', 3, 1)`,
		`INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at, attempt, started_at, completed_at)
			VALUES ('` + jobID + `', 'acme', 'builtin', 'succeeded', '{"1":{}}', now() + interval '1 hour', 1, now(), now())`,
		`INSERT INTO assets (id, account_id, hash, size_bytes, content_type, file_path, job_id, expires_at)
			VALUES ('` + assetID + `', 'acme', '` + hash + `', 3, 'image/png', 'x.png', '` + jobID + `', now() + interval '1 hour')`,
		`INSERT INTO job_outputs (job_id, attempt, seq, node_id, name, type, asset_id)
			VALUES ('` + jobID + `', 1, 1, '3', 'x.png', 'image', '` + assetID + `')`,
		`INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at)
			VALUES ('` + uuid.NewString() + `', 'acme', 'builtin', 'queued', '{}', now() + interval '1 hour')`,
	} {
		if _, err := st.pool.Exec(ctx, q); err != nil {
			t.Fatalf("writing old rows: %v\n%s", err, q)
		}
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	job, err := st.GetJob(ctx, account, jobID)
	if err != nil {
		t.Fatalf("GetJob of an old job: %v", err)
	}
	if job.Status != storage.JobSucceeded || job.DeploymentID != "" || len(job.Outputs) != 1 ||
		job.Outputs[0].Asset.ID != assetID || job.Outputs[0].Asset.DeploymentID != "" {
		t.Errorf("old job after the upgrade = %+v", job)
	}
	if _, ok, err := st.GetJobLog(ctx, account, jobID); err != nil || ok {
		t.Errorf("GetJobLog of an old job = ok %v, %v; want none", ok, err)
	}
	// The queue still works: the old queued job is claimed and can log.
	claimed, err := st.ClaimJob(ctx, "builtin", "w", time.Minute, 0, func(blob.Ref) error { return nil })
	if err != nil {
		t.Fatalf("ClaimJob of an old queued job: %v", err)
	}
	if err := st.SetJobLog(ctx, claimed.ID, claimed.Attempt, storage.JobLog{Text: "ok", CapturedAt: time.Now()}); err != nil {
		t.Errorf("SetJobLog on an old job: %v", err)
	}
	if _, err := st.CreateDeployment(ctx, storage.Deployment{ID: "acme-1", AccountID: account, Pool: "builtin",
		State: storage.DeploymentProvisioning}); err != nil {
		t.Errorf("CreateDeployment after the upgrade: %v", err)
	}
}

// previousBlobStatements are the blob-row statements of the release before
// migration 0010 (storage/postgres at 4bd1ca3), word for word: a gateway
// of that release must keep working on the migrated schema (issue 28's
// rolling upgrades), so 0010 may only add.
var previousBlobStatements = struct {
	reference, insertAsset, release, deleteBlob, findOrphans, holdOrphan, accountBlob string
}{
	reference: `INSERT INTO blobs (hash, size, refs) VALUES ($1, $2, 1)
		ON CONFLICT (hash) DO UPDATE SET refs = blobs.refs + 1`,
	insertAsset: `INSERT INTO assets (id, account_id, hash, size_bytes, content_type, file_path, tags)
		VALUES ($1, $2, $3, $4, 'image/png', 'x.png', '{}')`,
	release:     `UPDATE blobs SET refs = refs - $2 WHERE hash = $1 RETURNING refs`,
	deleteBlob:  `DELETE FROM blobs WHERE hash = $1`,
	findOrphans: `SELECT h FROM unnest($1::text[]) AS h WHERE NOT EXISTS (SELECT 1 FROM blobs WHERE hash = h)`,
	holdOrphan:  `INSERT INTO blobs (hash, size, refs) VALUES ($1, 0, 0) ON CONFLICT (hash) DO NOTHING`,
	accountBlob: `SELECT b.size FROM assets a JOIN blobs b ON b.hash = a.hash
		WHERE a.account_id = $1 AND a.hash = $2 LIMIT 1`,
}

// TestBlobObjectsMigrationIsExpandOnly: rows written before 0010 read back
// as objects at their address; after it, the previous release's statements
// work beside this release's code on one schema: its creates over a keyed
// blob keep the key (this release reads it), its new blobs are at their
// address, its releases and orphan look-ups run, and this release deletes
// what it created, removing the right object.
func TestBlobObjectsMigrationIsExpandOnly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	all, err := loadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	var before []migration
	for _, m := range all {
		if m.version < 10 {
			before = append(before, m)
		}
	}
	if err := migrate(ctx, st.pool, before); err != nil {
		t.Fatalf("migrating to 0009: %v", err)
	}
	old := previousBlobStatements
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := st.pool.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%v\n%s", err, q)
		}
	}
	// oldCreate is the previous release's create of an asset.
	oldCreate := func(account, hash string) string {
		t.Helper()
		id := uuid.NewString()
		exec(old.reference, hash, 3)
		exec(old.insertAsset, id, account, hash, 3)
		return id
	}
	hash := func(s string) string { return "blake3:" + fmt.Sprintf("%064x", []byte(s)) }
	legacy := oldCreate("acme", hash("before"))
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("upgrading: %v", err)
	}
	if a, err := st.GetAsset(ctx, "acme", legacy); err != nil || a.Object() != (blob.Ref{Hash: hash("before")}) {
		t.Fatalf("a row written before 0010 = %+v, %v; want its object at its address", a, err)
	}

	// This release stores bytes at a key; the previous one then uploads
	// the same bytes (its upsert keeps the key) and new ones (no key).
	keyed := storage.PublishFunc(func(*blob.Ref) (blob.Ref, error) { return blob.Ref{Hash: hash("keyed"), Key: "blobs/k1"}, nil })
	created, err := st.CreateAsset(ctx, storage.NewAsset{ID: uuid.NewString(), AccountID: "acme", Hash: hash("keyed"),
		SizeBytes: 3, ContentType: "image/png", FilePath: "k.png"}, keyed)
	if err != nil || created.Asset.ObjectKey != "blobs/k1" {
		t.Fatalf("a keyed create = %+v, %v", created, err)
	}
	overKeyed := oldCreate("other", hash("keyed"))
	fresh := oldCreate("acme", hash("after"))
	for id, want := range map[string]blob.Ref{overKeyed: {Hash: hash("keyed"), Key: "blobs/k1"}, fresh: {Hash: hash("after")}} {
		account := "acme"
		if id == overKeyed {
			account = "other"
		}
		if a, err := st.GetAsset(ctx, account, id); err != nil || a.Object() != want {
			t.Errorf("an asset the previous release created = %+v, %v; want the object %+v", a, err, want)
		}
	}
	var size int64
	if err := st.pool.QueryRow(ctx, old.accountBlob, "other", hash("keyed")).Scan(&size); err != nil || size != 3 {
		t.Errorf("the previous release's account blob look-up: %d, %v", size, err)
	}
	rows, err := st.pool.Query(ctx, old.findOrphans, []string{hash("keyed"), hash("none")})
	if err != nil {
		t.Fatal(err)
	}
	orphans, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(orphans) != 1 || orphans[0] != hash("none") {
		t.Errorf("the previous release's orphan look-up = %v, %v", orphans, err)
	}
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, old.holdOrphan, hash("none")); err != nil {
		t.Errorf("the previous release's orphan hold: %v", err)
	}
	_ = tx.Rollback(ctx)

	// The previous release deletes its asset over the keyed blob (one ref
	// left); this release deletes the last one and removes the key.
	var refs int
	if err := st.pool.QueryRow(ctx, old.release, hash("keyed"), 1).Scan(&refs); err != nil || refs != 1 {
		t.Fatalf("the previous release's release: %d, %v", refs, err)
	}
	exec(`DELETE FROM assets WHERE id = $1`, overKeyed)
	var removed []blob.Ref
	remove := func(obj blob.Ref) error { removed = append(removed, obj); return nil }
	if err := st.DeleteAsset(ctx, "acme", created.Asset.ID, remove); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteAsset(ctx, "acme", fresh, remove); err != nil {
		t.Fatal(err)
	}
	want := []blob.Ref{{Hash: hash("keyed"), Key: "blobs/k1"}, {Hash: hash("after")}}
	if !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v", removed, want)
	}
	// And the previous release's delete of the last reference still runs.
	if err := st.pool.QueryRow(ctx, old.release, hash("before"), 1).Scan(&refs); err != nil || refs != 0 {
		t.Fatalf("the previous release's last release: %d, %v", refs, err)
	}
	exec(`DELETE FROM assets WHERE id = $1`, legacy)
	exec(old.deleteBlob, hash("before"))
}
