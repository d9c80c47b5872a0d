package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/bench/seed"
)

// recorder is a pgx tracer that keeps every statement (with its
// arguments) a store sends, batches included.
type recorder struct {
	mu    sync.Mutex
	stmts []recorded
}

type recorded struct {
	sql  string
	args []any
}

func (r *recorder) add(sql string, args []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, recorded{sql, append([]any(nil), args...)})
}

func (r *recorder) take() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stmts
	r.stmts = nil
	return s
}

func (r *recorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.add(d.SQL, d.Args)
	return ctx
}
func (r *recorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (r *recorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (r *recorder) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	r.add(d.SQL, d.Args)
}
func (r *recorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
}

// scans lists a plan's scan nodes as "Node Type relation [index] {cond}".
func (n planNode) scans(out []string) []string {
	if n.Relation != "" || n.Index != "" {
		out = append(out, fmt.Sprintf("%s %s [%s] {%s}", n.NodeType, n.Relation, n.Index, n.IndexCond))
	}
	if strings.HasSuffix(n.NodeType, "Sort") {
		out = append(out, n.NodeType)
	}
	for _, c := range n.Plans {
		out = c.scans(out)
	}
	return out
}

// bigTables are the tables that grow with the jobs; a sequential scan of
// any of them is what the plans must never show.
var bigTables = map[string]bool{"jobs": true, "assets": true, "blobs": true, "job_outputs": true}

// TestQueryPlansAtScale seeds 100,000 jobs (with their outputs, uploads
// and blobs; tests/bench/seed) and checks, with EXPLAIN on the statements
// the store really sends (recorded by a pgx tracer, explained with their
// own arguments), that the list (first and deep keyset page, busy and
// quiet account), claim, dedup (by hash) and reaper queries read the index
// meant for them and scan none of the large tables sequentially.
func TestQueryPlansAtScale(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	plain, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	if err := plain.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	seedNow := time.Now()
	stats, err := seed.Postgres(ctx, plain.pool, seed.Plan{Jobs: 100_000, Now: seedNow})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %s", stats)

	rec := &recorder{}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	st := &Store{pool: pool}
	st.creates = newCreateBatcher(st)

	var deep struct {
		created time.Time
		id      string
	}
	if err := plain.pool.QueryRow(ctx, `SELECT created_at, id::text FROM jobs WHERE account_id = $1
		ORDER BY created_at DESC, id DESC OFFSET 5000 LIMIT 1`, seed.BusyAccount).Scan(&deep.created, &deep.id); err != nil {
		t.Fatal(err)
	}
	var lastQueued, upload struct{ id, account, hash, path string }
	if err := plain.pool.QueryRow(ctx, `SELECT id::text, account_id FROM jobs WHERE status = 'queued' AND account_id = $1
		ORDER BY turn DESC LIMIT 1`, seed.BusyAccount).Scan(&lastQueued.id, &lastQueued.account); err != nil {
		t.Fatal(err)
	}
	if err := plain.pool.QueryRow(ctx, `SELECT account_id, hash, file_path FROM assets WHERE job_id IS NULL LIMIT 1`).
		Scan(&upload.account, &upload.hash, &upload.path); err != nil {
		t.Fatal(err)
	}
	noRemove := func(blob.Ref) error { return nil }
	// Six hours on, the first 10 % of the seeded jobs are past retention.
	later := seedNow.Add(6 * time.Hour)

	cases := []struct {
		name string
		run  func() error
		// marker picks the statement to explain from those the call sent;
		// want names the index it must read, or indexes separated by |
		// (with cond, if set, in that index's condition); with inOrder the
		// plan must take the rows in that index's order (no sort: a
		// batch then reads about its LIMIT, not every due row).
		marker, want, cond string
		inOrder            bool
	}{
		{"list first page, busy account", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
			return err
		}, "FROM jobs WHERE account_id", "jobs_account_created", "", false},
		{"list page outputs", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
			return err
		}, "FROM job_outputs o JOIN assets a", "job_outputs_pkey", "", false},
		{"list deep keyset page, busy account", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100,
				Before: &storage.JobCursor{CreatedAt: deep.created, ID: deep.id}})
			return err
		}, "FROM jobs WHERE account_id", "jobs_account_created", "created_at <=", false},
		{"list quiet account", func() error {
			_, err := st.ListJobs(ctx, "acct-0500", storage.JobQuery{Limit: 100})
			return err
		}, "FROM jobs WHERE account_id", "jobs_account_created", "", false},
		{"queue position of the last queued job", func() error {
			_, err := st.GetJob(ctx, lastQueued.account, lastQueued.id)
			return err
		}, "CASE WHEN j.status = 'queued'", "jobs_turns", "", false},
		{"claim", func() error {
			_, err := st.ClaimJob(ctx, "builtin", "plans", time.Minute, 0, noRemove)
			return err
		}, "SKIP LOCKED", "jobs_turns", "", false},
		{"dedup HEAD by-hash", func() error {
			_, _, err := st.AccountBlob(ctx, upload.account, upload.hash)
			return err
		}, "FROM assets a JOIN blobs", "assets_account_hash", "", false},
		{"dedup from-hash", func() error {
			_, err := st.FindAsset(ctx, upload.account, upload.hash, upload.path)
			return err
		}, "FROM assets", "assets_account_hash|assets_account_path", "", false},
		{"reaper: expire jobs", func() error {
			_, err := st.ExpireJobs(ctx, later, later.Add(-2*time.Hour), 500)
			return err
		}, "UPDATE jobs SET status = 'expired'", "jobs_expires", "", false},
		{"reaper: expire jobs past the running bound", func() error {
			_, err := st.ExpireJobs(ctx, later, later.Add(-2*time.Hour), 500)
			return err
		}, "UPDATE jobs SET status = 'expired'", "jobs_running_started", "", false},
		{"reaper: expired assets", func() error {
			_, err := st.DeleteExpiredAssets(ctx, later, 500, noRemove)
			return err
		}, "FOR UPDATE SKIP LOCKED", "assets_expires_at", "", true},
		{"reaper: expired assets held by a job", func() error {
			_, err := st.DeleteExpiredAssets(ctx, later, 500, noRemove)
			return err
		}, "FOR UPDATE SKIP LOCKED", "job_outputs_asset", "", false},
		{"reaper: a blob's delete checks no asset is over it", func() error {
			// What the foreign key's check runs for each blob row the
			// reaper deletes (EXPLAIN of the DELETE does not show it).
			_, err := st.pool.Exec(ctx, `SELECT 1 FROM ONLY assets x WHERE hash OPERATOR(pg_catalog.=) $1
				FOR KEY SHARE OF x`, upload.hash)
			return err
		}, "FOR KEY SHARE OF x", "assets_hash", "hash =", false},
		{"reaper: purge jobs", func() error {
			_, err := st.DeleteExpiredJobs(ctx, later, 500)
			return err
		}, "DELETE FROM jobs", "jobs_terminal_expires", "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec.take()
			if err := tc.run(); err != nil && !strings.Contains(err.Error(), "not found") {
				t.Fatal(err)
			}
			var stmt *recorded
			for _, s := range rec.take() {
				if strings.Contains(s.sql, tc.marker) {
					stmt = &s
					break
				}
			}
			if stmt == nil {
				t.Fatalf("the call sent no statement containing %q", tc.marker)
			}
			scans := explain(t, plain.pool, *stmt)
			found := false
			for _, s := range scans {
				for tbl := range bigTables {
					if tc.inOrder && strings.HasSuffix(s, "Sort") {
						t.Errorf("the plan sorts (%s): a batch reads every due row", s)
					}
					if strings.HasPrefix(s, "Seq Scan "+tbl+" ") {
						t.Errorf("sequential scan of %s: %s", tbl, s)
					}
				}
				for _, want := range strings.Split(tc.want, "|") {
					if strings.Contains(s, "["+want+"]") && strings.Contains(s, tc.cond) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("plan does not read %s (cond %q); scans:\n%s", tc.want, tc.cond, strings.Join(scans, "\n"))
			}
			if t.Failed() {
				t.Logf("statement: %s", stmt.sql)
			}
		})
	}
}

// explain returns the scans of EXPLAIN (FORMAT JSON) of s with its own
// arguments (a plan, not a run: an UPDATE or DELETE changes nothing).
func explain(t *testing.T, pool *pgxpool.Pool, s recorded) []string {
	t.Helper()
	var out string
	if err := pool.QueryRow(context.Background(), "EXPLAIN (FORMAT JSON) "+s.sql, s.args...).Scan(&out); err != nil {
		t.Fatalf("explain: %v\n%s", err, s.sql)
	}
	var plans []struct {
		Plan planNode `json:"Plan"`
	}
	if err := json.Unmarshal([]byte(out), &plans); err != nil || len(plans) != 1 {
		t.Fatalf("explain output: %v\n%s", err, out)
	}
	return plans[0].Plan.scans(nil)
}
