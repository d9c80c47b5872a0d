package postgres

import (
	"context"
	"embed"
	"errors"
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

// ErrSchemaTooNew is Migrate's error on a schema holding a contract
// migration this gateway does not know.
var ErrSchemaTooNew = errors.New("postgres: schema too new for this gateway")

// migration is one versioned SQL file.
type migration struct {
	version int
	name    string
	sql     string
	// contract: the file holds contractMark, so gateways that do not know
	// it must not run on a schema it was applied to.
	contract bool
}

// contractMark, on a line of its own in a migration file, makes it a
// contract migration: one that removes or changes what an earlier release
// uses (a dropped column, a new NOT NULL without a default). Every other
// migration must be additive (expand only), so that a gateway of the
// previous release keeps working on the migrated schema during a rolling
// upgrade. A gateway refuses to start on a schema holding a contract
// migration it does not know; it runs on one holding unknown additive ones.
const contractMark = "-- comfygate:contract"

// Migrate applies every embedded migration the database has not recorded in
// schema_migrations, each in its own transaction, in version order. It holds
// a session advisory lock on one connection for the whole run, so processes
// starting together apply each migration once; the ones that waited find
// nothing left to do. Versions recorded by a newer binary are left alone
// when they are additive; a contract migration recorded by a newer binary
// makes Migrate fail (ErrSchemaTooNew), so an old gateway does not start on
// a schema it would misuse.
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
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(body),
			contract: slices.Contains(strings.Split(string(body), "\n"), contractMark)})
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
	// The bookkeeping table's own column, not a numbered migration: a
	// gateway must be able to read it before it knows any migration. A
	// previous release records its versions without it (false).
	var hasContract bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'schema_migrations' AND column_name = 'contract')`).Scan(&hasContract); err != nil {
		return fmt.Errorf("postgres: migrate: inspect schema_migrations: %w", err)
	}
	if !hasContract {
		if _, err := conn.Exec(ctx, `ALTER TABLE schema_migrations ADD COLUMN contract boolean NOT NULL DEFAULT false`); err != nil {
			return fmt.Errorf("postgres: migrate: extend schema_migrations: %w", err)
		}
	}

	rows, err := conn.Query(ctx, "SELECT version, name, contract FROM schema_migrations ORDER BY version")
	if err != nil {
		return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
	}
	applied := map[int]bool{}
	known := map[int]bool{}
	newest := 0
	for _, m := range ms {
		known[m.version] = true
		newest = max(newest, m.version)
	}
	var tooNew error
	for rows.Next() {
		var v int
		var name string
		var contract bool
		if err := rows.Scan(&v, &name, &contract); err != nil {
			rows.Close()
			return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
		}
		applied[v] = true
		if contract && !known[v] && tooNew == nil {
			tooNew = fmt.Errorf("%w: the database holds migration %s, which removes or changes what older gateways "+
				"use, and this gateway knows migrations up to %04d only: run a gateway of the release that added it "+
				"(or newer); see docs/postgres-ha.md, rolling upgrades", ErrSchemaTooNew, name, newest)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: migrate: read applied versions: %w", err)
	}
	if tooNew != nil {
		return tooNew
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
	if _, err := tx.Exec(ctx, "INSERT INTO schema_migrations (version, name, contract) VALUES ($1, $2, $3)", m.version, m.name, m.contract); err != nil {
		return fmt.Errorf("postgres: migration %s: record version: %w", m.name, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("postgres: migration %s: commit: %w", m.name, err)
	}
	return nil
}
