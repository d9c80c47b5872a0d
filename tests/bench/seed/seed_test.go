package seed_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/tests/bench/seed"
)

// migratedPostgres is a migrated store in a schema of the test's own.
func migratedPostgres(t *testing.T) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestSeedPostgres: the seeded rows read back through the store as its
// own, with consistent derived values.
func TestSeedPostgres(t *testing.T) {
	ctx := context.Background()
	st := migratedPostgres(t)
	stats, err := seed.Postgres(ctx, st.Pool(), seed.Plan{Jobs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %s", stats)
	checkSeeded(t, st, stats)
	db := st.Pool()
	var queued, counted, badRefs, busy int
	db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'queued'`).Scan(&queued)
	db.QueryRow(ctx, `SELECT coalesce(sum(n), 0) FROM queue_counts`).Scan(&counted)
	db.QueryRow(ctx, `SELECT count(*) FROM blobs b WHERE refs <> (SELECT count(*) FROM assets a WHERE a.hash = b.hash)`).
		Scan(&badRefs)
	db.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE account_id = $1`, seed.BusyAccount).Scan(&busy)
	if queued != stats.Queued || counted != queued || badRefs != 0 {
		t.Errorf("queued %d (stats %d), queue_counts %d, blobs with wrong refs %d", queued, stats.Queued, counted, badRefs)
	}
	if busy < 450 || busy > 550 {
		t.Errorf("busy account has %d of 5000 jobs, want ~10%%", busy)
	}
}

// checkSeeded reads the busy account's newest page through st: every
// succeeded job carries its output, and its deepest queued job has a
// position.
func checkSeeded(t *testing.T, st storage.Store, stats seed.Stats) {
	t.Helper()
	ctx := context.Background()
	jobs, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
	if err != nil || len(jobs) != 100 {
		t.Fatalf("ListJobs: %d jobs, %v", len(jobs), err)
	}
	succeeded := 0
	for _, j := range jobs {
		// Ids have the product's shape (storage.NewID): UUIDv7 of the
		// row's creation time.
		u, err := uuid.Parse(j.ID)
		sec, nsec := u.Time().UnixTime()
		if err != nil || u.Version() != 7 || time.Unix(sec, nsec).UnixMilli() != j.CreatedAt.UnixMilli() {
			t.Fatalf("job %s (created %v): want a UUIDv7 of its creation time (%v)", j.ID, j.CreatedAt, err)
		}
		if j.Status == storage.JobSucceeded {
			succeeded++
			if len(j.Outputs) != 1 || j.Outputs[0].Asset.Hash == "" || string(j.Workflow) != seed.Workflow {
				t.Fatalf("succeeded job %s: outputs %+v, workflow %d bytes", j.ID, j.Outputs, len(j.Workflow))
			}
		}
	}
	if succeeded == 0 || stats.Outputs == 0 || stats.Uploads == 0 || stats.Blobs == 0 {
		t.Fatalf("page has %d succeeded jobs; stats %s", succeeded, stats)
	}
	queued, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 1, Statuses: []string{storage.JobQueued}})
	if err != nil || len(queued) != 1 {
		t.Fatalf("no queued job of the busy account: %v", err)
	}
	if j, err := st.GetJob(ctx, seed.BusyAccount, queued[0].ID); err != nil || j.QueuePosition < 1 {
		t.Fatalf("GetJob of its newest queued job: position %d, %v", j.QueuePosition, err)
	}
}

// TestSeedSQLite: the same for the embedded store.
func TestSeedSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := seed.SQLite(ctx, st.Path(), seed.Plan{Jobs: 5000})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %s", stats)
	checkSeeded(t, st, stats)
	counts, err := st.CountJobs(ctx)
	if err != nil || counts["builtin"].Queued != int64(stats.Queued) {
		t.Errorf("CountJobs = %+v, %v; want %d queued", counts, err, stats.Queued)
	}
}

// TestSeedTime states how long seeding takes (COMFYGATE_BENCH=1; the
// sizes from COMFYGATE_SEED_JOBS, default 1,000,000 for Postgres, and
// COMFYGATE_SEED_EMBEDDED_JOBS, default 200,000):
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 60m -v -run TestSeedTime ./tests/bench/seed/
func TestSeedTime(t *testing.T) {
	if os.Getenv("COMFYGATE_BENCH") != "1" {
		t.Skip("a measurement: set COMFYGATE_BENCH=1")
	}
	ctx := context.Background()
	n, ne := envInt("COMFYGATE_SEED_JOBS", 1_000_000), envInt("COMFYGATE_SEED_EMBEDDED_JOBS", 200_000)
	if n > 0 {
		stats, err := seed.Postgres(ctx, migratedPostgres(t).Pool(), seed.Plan{Jobs: n})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("postgres: %s (%.0f jobs/s)", stats, float64(stats.Jobs)/stats.Took.Seconds())
	}
	if ne > 0 {
		st, err := embedded.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		if err := st.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
		stats, err := seed.SQLite(ctx, st.Path(), seed.Plan{Jobs: ne})
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("embedded: %s (%.0f jobs/s)", stats, float64(stats.Jobs)/stats.Took.Seconds())
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}
