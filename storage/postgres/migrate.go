package postgres

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationFiles holds the schema history. Later features (jobs, …) add
// files 0002_*.sql, 0003_*.sql, … here; an applied file is never edited.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migrationLockClass is the first half of the advisory lock key: a fixed
// number meaning "comfygate schema migration". The second half is a hash of
// the target schema, so processes migrating the same schema exclude each
// other while unrelated schemas on one server (parallel tests, several
// deployments) do not wait for each other.
const migrationLockClass int32 = 0x636f6d66 // "comf"

const lockSQLArgs = "$1::int4, hashtext(coalesce(current_schema(), ''))"

// migration is one versioned SQL file.
type migration struct {
	version int
	name    string
	sql     string
}

// Migrate applies every embedded migration the database has not recorded in
// schema_migrations, each in its own transaction, in version order. It holds
// a session advisory lock on one connection for the whole run, so processes
// starting together apply each migration once; the ones that waited find
// nothing left to do. Versions recorded by a newer binary are left alone.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations(migrationFiles, "migrations")
	if err != nil {
		return err
	}
	return migrate(ctx, s.pool, ms)
}

// loadMigrations reads dir's NNNN_name.sql files sorted by version and
// refuses duplicate or malformed versions, so a bad file fails loudly at
// startup instead of being skipped.
func loadMigrations(fsys fs.FS, dir string) ([]migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("postgres: read migrations: %w", err)
	}
	var ms []migration
	seen := map[int]string{}
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		prefix, _, ok := strings.Cut(e.Name(), "_")
		v, err := strconv.Atoi(prefix)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("postgres: migration %q: name must be NNNN_description.sql", e.Name())
		}
		if other, dup := seen[v]; dup {
			return nil, fmt.Errorf("postgres: migrations %q and %q share version %d", other, e.Name(), v)
		}
		seen[v] = e.Name()
		body, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("postgres: read migration %q: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	return ms, nil
}

func migrate(ctx context.Context, pool *pgxpool.Pool, ms []migration) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migrate: acquire connection: %w", err)
	}
	defer conn.Release()

	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock("+lockSQLArgs+")", migrationLockClass); err != nil {
		return fmt.Errorf("postgres: migrate: take advisory lock: %w", err)
	}
	defer func() {
		// Unlock even if ctx is done. If that fails, close the session: a
		// session lock dies with its connection, and a pooled connection
		// still holding it would block every later migration.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, uerr := conn.Exec(uctx, "SELECT pg_advisory_unlock("+lockSQLArgs+")", migrationLockClass); uerr != nil {
			_ = conn.Hijack().Close(uctx)
		}
	}()

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version integer PRIMARY KEY,
		name text NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now()
	)`); err != nil {
		return fmt.Errorf("postgres: migrate: create schema_migrations: %w", err)
	}

	rows, err := conn.Query(ctx, "SELECT version FROM schema_migrations")
	if err != nil {
		return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
	}
	applied := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
		}
		applied[v] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
	}

	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		if err := applyMigration(ctx, conn, m); err != nil {
			return err
		}
	}
	return nil
}

// applyMigration runs one file and records it in the same transaction, so a
// failed migration leaves neither its changes nor its version behind.
func applyMigration(ctx context.Context, conn *pgxpool.Conn, m migration) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("postgres: migration %s: begin: %w", m.name, err)
	}
	defer rollback(ctx, tx)
	// No arguments: pgx uses the simple protocol, which runs a file of
	// several statements.
	if _, err := tx.Exec(ctx, m.sql); err != nil {
		return fmt.Errorf("postgres: migration %s: %w", m.name, err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", m.version, m.name); err != nil {
		return fmt.Errorf("postgres: migration %s: record version: %w", m.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migration %s: commit: %w", m.name, err)
	}
	return nil
}
