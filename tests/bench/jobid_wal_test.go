package bench

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/postgres"
)

// TestBenchJobIDWAL: what a job's id costs its insert on a seeded store
// (COMFYGATE_SCALE_SIZES' large size, 1,000,000 jobs by default): 3,000
// sequential CreateJob calls with random (v4) ids against 3,000 with the
// product's time-ordered storage.NewID (v7), alternating twice, each pass
// after a CHECKPOINT so that every page it first touches is logged whole;
// WAL bytes, blocks read and time per insert.
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 30m -v -run TestBenchJobIDWAL ./tests/bench/
func TestBenchJobIDWAL(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	sizes := sizes("COMFYGATE_SCALE_SIZES", "10000,1000000")
	s := postgresScale(t, sizes[len(sizes)-1])
	db := s.st.(*postgres.Store).Pool()
	var body struct{ Workflow json.RawMessage }
	if err := json.Unmarshal(submitBody(chainWorkflow(10)), &body); err != nil {
		t.Fatal(err)
	}
	type idKind struct {
		name  string
		newID func() string
	}
	v4, v7 := idKind{"v4 (random)", uuid.NewString}, idKind{"v7 (storage.NewID)", storage.NewID}
	const inserts = 3000
	for _, kind := range []idKind{v4, v7, v4, v7} {
		if _, err := db.Exec(ctx, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		const probe = `SELECT pg_current_wal_lsn()::text, blks_read FROM pg_stat_database WHERE datname = current_database()`
		var lsn0, lsn1 string
		var read0, read1 int64
		if err := db.QueryRow(ctx, probe).Scan(&lsn0, &read0); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < inserts; i++ {
			if _, err := s.st.CreateJob(ctx, storage.NewJob{ID: kind.newID(), AccountID: "id-probe", Pool: "builtin",
				Workflow: body.Workflow, ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		took := time.Since(start)
		if err := db.QueryRow(ctx, probe).Scan(&lsn1, &read1); err != nil {
			t.Fatal(err)
		}
		var wal int64
		if err := db.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, lsn1, lsn0).Scan(&wal); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: WAL %d bytes, %.2f blocks read, %v per insert", kind.name, wal/inserts,
			float64(read1-read0)/inserts, (took / inserts).Round(time.Microsecond))
	}
}
