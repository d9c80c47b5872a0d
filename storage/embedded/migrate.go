package embedded

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"
)

// migrationFiles holds the schema history. Files are named NNNN_name.sql and
// applied in numeric order; a new table (jobs, for example) is a new file with
// the next number, never an edit to an applied one.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one versioned schema step.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads and orders the embedded migrations, refusing gaps and
// duplicate numbers so that a misnamed file fails loudly.
func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, fmt.Errorf("embedded: read migrations: %w", err)
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok || !strings.HasSuffix(name, ".sql") {
			return nil, fmt.Errorf("embedded: migration %q is not named NNNN_name.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("embedded: migration %q has no positive version", name)
		}
		body, err := fs.ReadFile(migrationFiles, "migrations/"+name)
		if err != nil {
			return nil, fmt.Errorf("embedded: read migration %q: %w", name, err)
		}
		out = append(out, migration{version: v, name: name, sql: string(body)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	for i, m := range out {
		if m.version != i+1 {
			return nil, fmt.Errorf("embedded: migration %q out of sequence: want version %d", m.name, i+1)
		}
	}
	return out, nil
}

// Migrate applies every embedded migration not yet recorded in
// schema_migrations, each in its own IMMEDIATE transaction that re-checks the
// record first. The write lock makes concurrent Migrate calls (from this or
// another process) apply each step exactly once; a repeat call is a no-op.
func (s *Store) Migrate(ctx context.Context) error {
	migrations, err := loadMigrations()
	if err != nil {
		return err
	}
	err = s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version INTEGER PRIMARY KEY,
			name TEXT NOT NULL,
			applied_at TEXT NOT NULL)`)
		return err
	})
	if err != nil {
		return fmt.Errorf("embedded: create schema_migrations: %w", err)
	}
	for _, m := range migrations {
		err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
			var applied bool
			if err := tx.QueryRowContext(ctx,
				`SELECT EXISTS (SELECT 1 FROM schema_migrations WHERE version = ?)`, m.version,
			).Scan(&applied); err != nil {
				return err
			}
			if applied {
				return nil
			}
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx,
				`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
				m.version, m.name, formatTime(now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("embedded: migration %s: %w", m.name, err)
		}
	}
	return nil
}
