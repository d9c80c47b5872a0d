package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
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
	claimed, err := st.ClaimJob(ctx, "builtin", "w", time.Minute, 0, func(string) error { return nil })
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
