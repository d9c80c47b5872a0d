package embedded

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/storetest"
)

// openMigrated opens a fresh store in a temp dir, migrates it and closes it
// when the test ends: the factory contract of storetest.
func openMigrated(t *testing.T) *Store {
	t.Helper()
	s, err := Open(t.TempDir())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return s
}

func TestConformance(t *testing.T) {
	storetest.RunStore(t, func(t *testing.T) storage.Store { return openMigrated(t) })
}

func TestOpenCreatesPrivateDirAndFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "nested", "state")
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer s.Close()
	info, err := os.Stat(dir)
	if err != nil {
		t.Fatalf("stat dir: %v", err)
	}
	if perm := info.Mode().Perm(); perm != 0o700 {
		t.Errorf("dir mode = %o, want 700", perm)
	}
	if want := filepath.Join(dir, FileName); s.Path() != want {
		t.Errorf("Path() = %q, want %q", s.Path(), want)
	}
	if _, err := os.Stat(s.Path()); err != nil {
		t.Errorf("database file not created: %v", err)
	}
	if _, err := Open(""); err == nil {
		t.Error("Open(\"\") succeeded")
	}
}

// TestReopenKeepsData checks that data and the migration record survive a
// close and reopen of the same directory, and that WAL is in force.
func TestReopenKeepsData(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(dir)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	a := storage.NewAsset{ID: "a1", AccountID: "acct", Hash: "blake3:00", FilePath: "x.png"}
	if _, err := s.CreateAsset(ctx, a, atAddress(a.Hash)); err != nil {
		t.Fatalf("CreateAsset: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}

	s, err = Open(dir)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate after reopen: %v", err)
	}
	if _, err := s.GetAsset(ctx, "acct", "a1"); err != nil {
		t.Errorf("GetAsset after reopen: %v", err)
	}
	var applied int
	if err := s.read.QueryRowContext(ctx, `SELECT count(*) FROM schema_migrations`).Scan(&applied); err != nil {
		t.Fatalf("count migrations: %v", err)
	}
	migrations, err := loadMigrations()
	if err != nil {
		t.Fatal(err)
	}
	if applied != len(migrations) {
		t.Errorf("schema_migrations has %d rows, want %d", applied, len(migrations))
	}
	var mode string
	if err := s.read.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		t.Fatalf("journal_mode: %v", err)
	}
	if mode != "wal" {
		t.Errorf("journal_mode = %q, want wal", mode)
	}
}

// TestConnectionPragmas: every connection, the writer and each reader,
// runs with the store's settings (WAL, foreign keys, the page cache).
func TestConnectionPragmas(t *testing.T) {
	s := openMigrated(t)
	ctx := context.Background()
	for name, db := range map[string]interface {
		QueryRowContext(context.Context, string, ...any) *sql.Row
	}{"writer": s.write, "reader": s.read} {
		var mode string
		var fk, cache int
		if err := db.QueryRowContext(ctx, `SELECT journal_mode, foreign_keys, cache_size
			FROM pragma_journal_mode, pragma_foreign_keys, pragma_cache_size`).Scan(&mode, &fk, &cache); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if mode != "wal" || fk != 1 || cache != -pageCacheKiB {
			t.Errorf("%s: journal_mode %s, foreign_keys %d, cache_size %d; want wal, 1, %d", name, mode, fk, cache, -pageCacheKiB)
		}
	}
}

// atAddress is the publish step of a create whose bytes are at their
// address.
func atAddress(hash string) storage.Publisher {
	return storage.PublishFunc(func(*blob.Ref) (blob.Ref, error) { return blob.Ref{Hash: hash}, nil })
}
