package embedded

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"modernc.org/sqlite"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/tests/bench/seed"
)

// recording is a database/sql driver over the store's SQLite driver that
// keeps every statement (with its arguments) the store runs.
type recording struct {
	mu    sync.Mutex
	stmts []recordedStmt
}

type recordedStmt struct {
	sql  string
	args []any
}

func (r *recording) add(q string, args []driver.NamedValue) {
	vals := make([]any, len(args))
	for i, a := range args {
		vals[i] = a.Value
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stmts = append(r.stmts, recordedStmt{q, vals})
}

func (r *recording) take() []recordedStmt {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stmts
	r.stmts = nil
	return s
}

func (r *recording) Open(name string) (driver.Conn, error) {
	c, err := (&sqlite.Driver{}).Open(name)
	if err != nil {
		return nil, err
	}
	return &recConn{c.(sqliteConn), r}, nil
}

// sqliteConn is what the SQLite driver's connections implement.
type sqliteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ExecerContext
	driver.QueryerContext
	driver.ConnPrepareContext
}

type recConn struct {
	sqliteConn
	r *recording
}

func (c *recConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.r.add(q, args)
	return c.sqliteConn.ExecContext(ctx, q, args)
}

func (c *recConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.add(q, args)
	return c.sqliteConn.QueryContext(ctx, q, args)
}

// bigTables grow with the jobs; a full scan of one is what the plans must
// never show.
var bigTables = []string{"jobs", "assets", "blobs", "job_outputs"}

// TestQueryPlansAtScale seeds 30,000 jobs (with their outputs, uploads and
// blobs: over 100,000 rows; tests/bench/seed) and checks with EXPLAIN QUERY
// PLAN, on the statements the store really runs (recorded by a wrapping
// driver, explained with their own arguments), that the list (first and
// deep keyset page), claim, dedup (by hash) and reaper queries search the
// index meant for them and scan none of the large tables.
func TestQueryPlansAtScale(t *testing.T) {
	ctx := context.Background()
	plain := openMigrated(t)
	seedNow := time.Now()
	stats, err := seed.SQLite(ctx, plain.Path(), seed.Plan{Jobs: 30_000, Now: seedNow})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %s", stats)
	rec := &recording{}
	name := fmt.Sprintf("sqlite-recording-%p", rec)
	sql.Register(name, rec)
	open := func(readOnly bool) *sql.DB {
		db, err := sql.Open(name, dsn(plain.Path(), readOnly))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	st := &Store{path: plain.Path(), write: open(false), read: open(true)}
	st.write.SetMaxOpenConns(1)

	var deep storage.JobCursor
	var lastQueued, upAccount, upHash, upPath string
	if err := plain.read.QueryRowContext(ctx, `SELECT created_at, id FROM jobs WHERE account_id = ?
		ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET 1500`, seed.BusyAccount).Scan(&upPath, &deep.ID); err != nil {
		t.Fatal(err)
	}
	if deep.CreatedAt, err = parseTime(upPath); err != nil {
		t.Fatal(err)
	}
	if err := plain.read.QueryRowContext(ctx, `SELECT id FROM jobs WHERE status = 'queued' AND account_id = ?
		ORDER BY turn DESC LIMIT 1`, seed.BusyAccount).Scan(&lastQueued); err != nil {
		t.Fatal(err)
	}
	if err := plain.read.QueryRowContext(ctx, `SELECT account_id, hash, file_path FROM assets WHERE job_id IS NULL LIMIT 1`).
		Scan(&upAccount, &upHash, &upPath); err != nil {
		t.Fatal(err)
	}
	noRemove := func(blob.Ref) error { return nil }
	later := seedNow.Add(6 * time.Hour) // the first 10 % are past retention

	cases := []struct {
		name         string
		run          func() error
		marker, want string // the statement to explain; the index it must search (or indexes, |-separated)
	}{
		{"list first page, busy account", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
			return err
		}, "FROM jobs WHERE account_id", "jobs_account_created (account_id=?)"},
		{"list page outputs", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100})
			return err
		}, "FROM job_outputs", "job_outputs"},
		{"list deep keyset page, busy account", func() error {
			_, err := st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 100, Before: &deep})
			return err
		}, "FROM jobs WHERE account_id", "jobs_account_created (account_id=? AND created_at<?)"},
		{"queue position of the last queued job", func() error {
			_, err := st.GetJob(ctx, seed.BusyAccount, lastQueued)
			return err
		}, "(q.turn, q.created_at, q.id) <", "jobs_turns"},
		{"claim", func() error {
			_, err := st.ClaimJob(ctx, "builtin", "plans", time.Minute, 0, noRemove)
			return err
		}, "status = 'queued'", "jobs_turns"},
		{"dedup HEAD by-hash", func() error {
			_, _, err := st.AccountBlob(ctx, upAccount, upHash)
			return err
		}, "hash = ?", "assets_account_hash"},
		{"dedup from-hash", func() error {
			_, err := st.FindAsset(ctx, upAccount, upHash, upPath)
			return err
		}, "hash = ?", "assets_account_hash|assets_account_path"},
		{"reaper: expire jobs", func() error {
			_, err := st.ExpireJobs(ctx, later, later.Add(-2*time.Hour), 500)
			return err
		}, "UPDATE jobs SET status = 'expired'", "jobs_expires"},
		{"reaper: expired assets", func() error {
			_, err := st.DeleteExpiredAssets(ctx, later, 100, noRemove)
			return err
		}, "ORDER BY expires_at LIMIT", "assets_expires"},
		{"reaper: purge jobs", func() error {
			_, err := st.DeleteExpiredJobs(ctx, later, 500)
			return err
		}, "DELETE FROM jobs", "jobs_terminal_expires"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec.take()
			if err := tc.run(); err != nil && !strings.Contains(err.Error(), "not found") {
				t.Fatal(err)
			}
			var stmt *recordedStmt
			for _, s := range rec.take() {
				if strings.Contains(s.sql, tc.marker) && !strings.HasPrefix(strings.TrimSpace(s.sql), "EXPLAIN") {
					stmt = &s
					break
				}
			}
			if stmt == nil {
				t.Fatalf("the call ran no statement containing %q", tc.marker)
			}
			details := explainQueryPlan(t, plain.read, *stmt)
			found := false
			for _, d := range details {
				for _, tbl := range bigTables {
					if d == "SCAN "+tbl || strings.HasPrefix(d, "SCAN "+tbl+" ") {
						t.Errorf("full scan of %s: %s", tbl, d)
					}
				}
				for _, want := range strings.Split(tc.want, "|") {
					if strings.Contains(d, want) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("plan does not search %q:\n%s", tc.want, strings.Join(details, "\n"))
			}
			if t.Failed() {
				t.Logf("statement: %s", stmt.sql)
			}
		})
	}
}

// explainQueryPlan returns the detail lines of EXPLAIN QUERY PLAN of s.
func explainQueryPlan(t *testing.T, db *sql.DB, s recordedStmt) []string {
	t.Helper()
	rows, err := db.Query("EXPLAIN QUERY PLAN "+s.sql, s.args...)
	if err != nil {
		t.Fatalf("explain: %v\n%s", err, s.sql)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		out = append(out, detail)
	}
	return out
}
