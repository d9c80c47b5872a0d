package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest/pgcluster"
	"github.com/comfygate/comfygate/storage/postgres"
)

func newJob() storage.NewJob {
	return storage.NewJob{ID: uuid.NewString(), AccountID: "acct", Pool: "p",
		Workflow: json.RawMessage(`{"1": {"class_type":"X"}}`), ExpiresAt: time.Now().Add(time.Hour)}
}

// openCluster opens a store on the cluster's two-host DSN, migrated, with
// several pooled connections open to the primary.
func openCluster(t *testing.T, c *pgcluster.Cluster) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := postgres.Open(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { _, _ = st.Pool().Exec(ctx, "SELECT pg_sleep(0.2)") })
	}
	wg.Wait()
	if n := st.Pool().Stat().IdleConns(); n < 2 {
		t.Fatalf("%d idle connections after warming the pool, want several", n)
	}
	return st
}

// untilWrite creates jobs one after another until one succeeds, returning
// the failures before it; it fails the test if none succeeds in attempts.
func untilWrite(t *testing.T, st *postgres.Store, attempts int) []error {
	t.Helper()
	var failed []error
	for range attempts {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := st.CreateJob(ctx, newJob())
		cancel()
		if err == nil {
			return failed
		}
		failed = append(failed, err)
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("no write succeeded in %d attempts; last: %v", attempts, failed[len(failed)-1])
	return nil
}

// TestFailoverToPromotedStandby: the primary crashes (pg_ctl stop -m
// immediate) and the standby is promoted; the store, on a DSN naming both
// with target_session_attrs=read-write, writes again on the promoted node
// without being reopened, and with synchronous replication every job whose
// create returned before the crash is there.
func TestFailoverToPromotedStandby(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := map[bool]string{false: "async", true: "sync"}[sync]
		t.Run(name, func(t *testing.T) {
			c := pgcluster.Start(t, pgcluster.Options{Sync: sync})
			st := openCluster(t, c)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var acked []string
			for range 20 {
				j := newJob()
				if _, err := st.CreateJob(ctx, j); err != nil {
					t.Fatal(err)
				}
				acked = append(acked, j.ID)
			}
			if err := c.Failover("immediate"); err != nil {
				t.Fatal(err)
			}
			idle := st.Pool().Stat().IdleConns()
			failed := untilWrite(t, st, 100)
			t.Logf("%d failed writes before the first on the promoted standby (%d idle connections to the old primary)", len(failed), idle)
			// Not one failed request per dead pooled connection: the first
			// broken one makes the store drop the others.
			if len(failed) > int(idle)/2 {
				t.Errorf("%d writes failed before one reached the promoted standby, with %d dead connections pooled", len(failed), idle)
			}
			if sync {
				for _, id := range acked {
					if _, err := st.GetJob(ctx, "acct", id); err != nil {
						t.Errorf("acknowledged job %s after the failover: %v", id, err)
					}
				}
			}
		})
	}
}

// TestFencedPrimaryConnectionsDropped: the old primary stays up but turns
// read-only (default_transaction_read_only, as a fencing tool does) and the
// standby is promoted. Pooled connections to the old primary answer
// read_only_sql_transaction; the store closes each one that does, so new
// connections find the promoted node (target_session_attrs=read-write),
// and the failed writes are storage.ErrNotCommitted (no effect: the
// idempotency layer frees their keys).
func TestFencedPrimaryConnectionsDropped(t *testing.T) {
	c := pgcluster.Start(t, pgcluster.Options{})
	st := openCluster(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	idle := st.Pool().Stat().IdleConns()
	if _, err := st.Pool().Exec(ctx, "ALTER SYSTEM SET default_transaction_read_only = on"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Pool().Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(); err != nil {
		t.Fatal(err)
	}
	failed := untilWrite(t, st, int(idle)+5)
	for _, err := range failed {
		if !errors.Is(err, storage.ErrNotCommitted) {
			t.Errorf("write on the fenced primary: %v, want ErrNotCommitted", err)
		}
	}
	t.Logf("%d writes failed on the fenced primary (%d idle connections to it)", len(failed), idle)
	// Every later write goes to the promoted node.
	for range 10 {
		if _, err := st.CreateJob(ctx, newJob()); err != nil {
			t.Fatalf("write after the switch: %v", err)
		}
	}
}
