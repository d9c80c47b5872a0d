package bench

import (
	"context"
	"database/sql"
	"time"
)

// embeddedDue is scaleStore.due for the embedded store's file at path.
func embeddedDue(ctx context.Context, path string, n int) (int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_txlock=immediate")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	past := time.Now().Add(-time.Minute).UTC().Format("2006-01-02T15:04:05.000000Z")
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TEMP TABLE due AS SELECT id FROM jobs
		WHERE status IN ('queued', 'succeeded') ORDER BY created_at LIMIT ?`, n); err != nil {
		return 0, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE assets SET expires_at = ? WHERE job_id IN (SELECT id FROM due)`, past); err != nil {
		return 0, err
	}
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET expires_at = ? WHERE id IN (SELECT id FROM due)`, past)
	if err != nil {
		return 0, err
	}
	k, _ := res.RowsAffected()
	return int(k), tx.Commit()
}

// embeddedPending is scaleStore.pending for the embedded store at path.
func embeddedPending(ctx context.Context, path string) (int, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=query_only(1)")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	now := time.Now().UTC().Format("2006-01-02T15:04:05.000000Z")
	var n int
	err = db.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running', 'canceling')
		AND expires_at < ?1) + (SELECT count(*) FROM assets WHERE expires_at IS NOT NULL AND expires_at < ?1)`, now).Scan(&n)
	return n, err
}

// embeddedRestore is scaleStore.restore for the embedded store at path.
func embeddedRestore(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(30000)&_pragma=foreign_keys(1)&_txlock=immediate")
	if err != nil {
		return err
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range restoreSQL {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return tx.Commit()
}
