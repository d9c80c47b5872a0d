package seed

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	_ "modernc.org/sqlite" // the embedded store's driver
)

// sqliteTime is the embedded store's timestamp text (storage/embedded).
const sqliteTime = "2006-01-02T15:04:05.000000Z"

func sqlTime(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UTC().Format(sqliteTime)
}

// SQLite writes p into the migrated embedded store at path (the
// comfygate.db file) in one transaction of multi-row INSERTs, blobs, assets,
// jobs and job_outputs in that order, then ANALYZEs. The jobs triggers keep
// queue_counts. The store may be open meanwhile; its writers wait.
func SQLite(ctx context.Context, path string, p Plan) (Stats, error) {
	start := time.Now()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return Stats{}, fmt.Errorf("seed: open %s: %w", path, err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return Stats{}, fmt.Errorf("seed: begin: %w", err)
	}
	defer tx.Rollback()
	g := newGen(p)
	var st Stats
	ins := func(table string, cols []string) *batchInsert {
		return &batchInsert{ctx: ctx, tx: tx, head: "INSERT INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES ",
			row: "(" + strings.TrimSuffix(strings.Repeat("?, ", len(cols)), ", ") + ")"}
	}
	blobs := ins("blobs", []string{"hash", "size", "refs"})
	if err := g.blobs(func(b Blob) error { st.Blobs++; return blobs.add(b.Hash, b.Size, b.Refs) }); err != nil {
		return st, err
	}
	if err := blobs.flush(); err != nil {
		return st, err
	}
	assets := ins("assets", []string{"id", "account_id", "hash", "size_bytes", "content_type", "file_path",
		"job_id", "created_at", "expires_at"})
	if err := g.assets(func(a Asset) error {
		if a.JobID != nil {
			st.Outputs++
		} else {
			st.Uploads++
		}
		return assets.add(a.ID, a.Account, a.Hash, a.Size, a.ContentType, a.FilePath, a.JobID, sqlTime(&a.Created),
			sqlTime(a.Expires))
	}); err != nil {
		return st, err
	}
	if err := assets.flush(); err != nil {
		return st, err
	}
	jobs := ins("jobs", []string{"id", "account_id", "pool", "status", "workflow", "created_at", "started_at",
		"completed_at", "expires_at", "progress", "error", "attempt", "idempotency_key", "turn"})
	outputs := ins("job_outputs", []string{"job_id", "attempt", "seq", "node_id", "name", "type", "asset_id"})
	for i := range g.p.Jobs {
		j := g.job(i)
		if j.Status == "queued" {
			st.Queued++
		}
		st.Jobs++
		if err := jobs.add(j.ID, j.Account, g.p.Pool, j.Status, Workflow, sqlTime(&j.Created), sqlTime(j.Started),
			sqlTime(j.Completed), sqlTime(&j.Expires), j.Progress, j.Error, j.Attempt, j.IdempotencyKey, j.Turn); err != nil {
			return st, err
		}
	}
	if err := jobs.flush(); err != nil {
		return st, err
	}
	for i := range g.p.Jobs {
		if a, ok := g.output(i); ok {
			if err := outputs.add(*a.JobID, 1, 0, "9", a.FilePath, "output", a.ID); err != nil {
				return st, err
			}
		}
	}
	if err := outputs.flush(); err != nil {
		return st, err
	}
	if _, err := tx.ExecContext(ctx, "ANALYZE"); err != nil {
		return st, fmt.Errorf("seed: analyze: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return st, fmt.Errorf("seed: commit: %w", err)
	}
	st.Took = time.Since(start)
	return st, nil
}

// batchInsert gathers rows and writes them sqliteBatch at a time.
type batchInsert struct {
	ctx       context.Context
	tx        *sql.Tx
	head, row string
	args      []any
	n         int
}

// sqliteBatch rows per statement: well under SQLite's 32,766 variables.
const sqliteBatch = 200

func (b *batchInsert) add(vals ...any) error {
	b.args = append(b.args, vals...)
	b.n++
	if b.n == sqliteBatch {
		return b.flush()
	}
	return nil
}

func (b *batchInsert) flush() error {
	if b.n == 0 {
		return nil
	}
	q := b.head + strings.TrimSuffix(strings.Repeat(b.row+", ", b.n), ", ")
	if _, err := b.tx.ExecContext(b.ctx, q, b.args...); err != nil {
		return fmt.Errorf("seed: %s…: %w", b.head[:min(len(b.head), 40)], err)
	}
	b.args, b.n = b.args[:0], 0
	return nil
}
