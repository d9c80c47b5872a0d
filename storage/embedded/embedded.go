// Package embedded is the zero-setup storage.Store: one SQLite file
// (pure Go, modernc.org/sqlite) in a directory the operator chooses.
//
// Concurrency model: every write goes through one connection (a *sql.DB with
// MaxOpenConns(1)) and starts with BEGIN IMMEDIATE, so writers queue in Go
// instead of failing with SQLITE_BUSY, and a transaction that holds a blob's
// row holds the whole database. Reads use a separate pool and, under WAL,
// never block on the writer. That single-writer queue is what makes the blob
// reference protocol safe: publish runs inside the write transaction, and
// the removal of bytes left without a reference in a write transaction of
// its own after the one that dropped the reference has committed, so no
// create can interleave with the delete of the same bytes.
// A BlobFunc must therefore not write to this store itself (it would wait for
// the connection it is running on).
package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/comfygate/comfygate/storage"
)

// FileName is the database file Open creates inside its directory.
const FileName = "comfygate.db"

// busyTimeout bounds how long a connection waits for another process's lock
// (a second comfygate on the same file, or a WAL checkpoint).
const busyTimeout = 10 * time.Second

// timeLayout is how timestamps are stored: UTC, fixed width, microseconds,
// so that comparing the text compares the times and every backend keeps the
// same precision.
const timeLayout = "2006-01-02T15:04:05.000000Z"

// Store is the SQLite-backed storage.Store.
type Store struct {
	path  string
	write *sql.DB // exactly one connection; every transaction is IMMEDIATE
	read  *sql.DB // read-only pool
}

var _ storage.Store = (*Store)(nil)

// Open opens (creating if needed) <dir>/comfygate.db, creating dir with mode
// 0700. It does not migrate; call Migrate before use. Open touches the file
// system, so config validation (caddy validate) should not call it — open the
// store when the app provisions or starts, not when the config is checked.
func Open(dir string) (*Store, error) { return open(dir, "sqlite") }

// open is Open with the writer's database/sql driver named: the fault
// matrix's tests put a fault injector between the store and SQLite there.
func open(dir, writeDriver string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("embedded: empty directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("embedded: resolve %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("embedded: create directory: %w", err)
	}
	path := filepath.Join(abs, FileName)

	write, err := sql.Open(writeDriver, dsn(path, false))
	if err != nil {
		return nil, fmt.Errorf("embedded: open writer: %w", err)
	}
	write.SetMaxOpenConns(1)
	write.SetMaxIdleConns(1)
	write.SetConnMaxLifetime(0)
	write.SetConnMaxIdleTime(0)

	ctx, cancel := context.WithTimeout(context.Background(), busyTimeout+5*time.Second)
	defer cancel()
	// The writer's first connection creates the file and switches it to WAL
	// before any reader opens it.
	if err := write.PingContext(ctx); err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("embedded: open %s: %w", path, err)
	}
	read, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		_ = write.Close()
		return nil, fmt.Errorf("embedded: open reader: %w", err)
	}
	read.SetMaxOpenConns(4)
	if err := read.PingContext(ctx); err != nil {
		_ = write.Close()
		_ = read.Close()
		return nil, fmt.Errorf("embedded: open reader %s: %w", path, err)
	}
	return &Store{path: path, write: write, read: read}, nil
}

// pageCacheKiB bounds each connection's page cache (one writer and up to
// four readers).
const pageCacheKiB = 32 << 10

// dsn builds the driver's URI for path. Readers are query-only so that a bug
// cannot write outside the serialized writer.
func dsn(path string, readOnly bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	q.Add("_pragma", "synchronous(NORMAL)")
	// SQLite's default page cache is 2 MB per connection; a store of a
	// few hundred thousand jobs has an index and row working set well
	// past that, and a page that falls out is read and decoded again
	// (a quiet account's first page of jobs took 1.7× as long at 200k
	// jobs as at 10k; with this cache 0.96×, BENCHMARKS.md "Scale"). The
	// cache fills only as pages are read, so a small store stays small.
	q.Add("_pragma", fmt.Sprintf("cache_size(%d)", -pageCacheKiB))
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	} else {
		q.Set("_txlock", "immediate")
	}
	u := url.URL{Scheme: "file", Path: filepath.ToSlash(path), RawQuery: q.Encode()}
	return u.String()
}

// Path returns the database file's path (for logs and diagnostics).
func (s *Store) Path() string { return s.path }

// Close closes both connection pools.
func (s *Store) Close() error {
	return errors.Join(s.read.Close(), s.write.Close())
}

// Ping reads from the database file.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.read.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return fmt.Errorf("embedded: ping: %w", err)
	}
	return nil
}

// inWriteTx runs fn in a write transaction on the single writer connection,
// committing when fn returns nil and rolling back otherwise.
func (s *Store) inWriteTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	tx, err := s.write.BeginTx(ctx, nil)
	if err != nil {
		// No transaction began: nothing of the write happened.
		return fmt.Errorf("embedded: begin: %w: %w", storage.ErrNotSent, err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		// SQLite rolls back a COMMIT that fails, but an error may also
		// come after the commit took effect (an I/O error reported late):
		// whatever depends on the outcome must not assume either.
		return fmt.Errorf("embedded: commit: %w: %w", storage.ErrInDoubt, err)
	}
	return nil
}

// formatTime renders t for storage.
func formatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// parseTime reads a stored timestamp back as UTC.
func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("embedded: bad stored time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// parseNullTime reads a nullable stored timestamp.
func parseNullTime(s sql.NullString) (*time.Time, error) {
	if !s.Valid {
		return nil, nil
	}
	t, err := parseTime(s.String)
	if err != nil {
		return nil, err
	}
	return &t, nil
}

// now is the store's clock, truncated to the stored precision so that what
// a create returns equals what a later read returns.
func now() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// nullString maps "" to NULL.
func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// isUniqueViolation reports whether err is a UNIQUE or PRIMARY KEY failure.
func isUniqueViolation(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() {
	case sqlite3.SQLITE_CONSTRAINT_UNIQUE, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return true
	}
	return false
}
