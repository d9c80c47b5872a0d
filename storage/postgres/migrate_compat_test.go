package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
)

// TestSchemaNewerThanGateway: a newer gateway applied migrations this one
// does not know. An additive one (expand) is tolerated: this gateway keeps
// starting on the schema, as a rolling upgrade needs. A contract one
// (marked contractMark) makes Migrate refuse with ErrSchemaTooNew and a
// message naming the migration and what this gateway knows.
func TestSchemaNewerThanGateway(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	all, err := loadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	newer := append(all, migration{version: 9998, name: "9998_expand.sql",
		sql: "-- an additive change of a newer release\nCREATE TABLE future_expand (x int);"})
	if err := migrate(ctx, st.pool, newer); err != nil {
		t.Fatalf("the newer gateway's migrations: %v", err)
	}
	if err := st.Migrate(ctx); err != nil {
		t.Fatalf("Migrate on a schema with an unknown additive migration: %v, want it tolerated", err)
	}
	newer = append(newer, migration{version: 9999, name: "9999_contract.sql", contract: true,
		sql: contractMark + "\nALTER TABLE future_expand DROP COLUMN x;"})
	if err := migrate(ctx, st.pool, newer); err != nil {
		t.Fatalf("the newer gateway's contract migration: %v", err)
	}
	err = st.Migrate(ctx)
	if !errors.Is(err, ErrSchemaTooNew) || !strings.Contains(err.Error(), "9999_contract.sql") {
		t.Fatalf("Migrate on a schema with an unknown contract migration: %v, want ErrSchemaTooNew naming it", err)
	}
	t.Logf("refusal: %v", err)
	// The newer gateway itself still starts.
	if err := migrate(ctx, st.pool, newer); err != nil {
		t.Fatalf("the newer gateway again: %v", err)
	}
}

// TestContractMark: loadMigrations reads the mark on a line of its own
// only, and no shipped migration carries it (every one so far is
// additive).
func TestContractMark(t *testing.T) {
	all, err := loadMigrations(migrationFiles, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range all {
		if m.contract {
			t.Errorf("%s is marked contract; this release's migrations are all additive", m.name)
		}
	}
}
