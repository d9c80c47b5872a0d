package pgcluster_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage/pgtest/pgcluster"
)

// TestFailover: a row written on the primary is on the standby; in sync
// mode the primary reports the standby synchronous; after the primary is
// stopped and the standby promoted, the two-host DSN reaches the promoted
// node and the row is there.
func TestFailover(t *testing.T) {
	for _, sync := range []bool{false, true} {
		name := "async"
		if sync {
			name = "sync"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := pgcluster.Start(t, pgcluster.Options{Sync: sync})
			conn, err := pgx.Connect(ctx, c.DSN())
			if err != nil {
				t.Fatal(err)
			}
			var port int
			if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil || port != c.Primary.Port {
				t.Fatalf("two-host DSN reached port %d (%v), want the primary's %d", port, err, c.Primary.Port)
			}
			var mode string
			if err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication").Scan(&mode); err != nil {
				t.Fatal(err)
			}
			if want := map[bool]string{true: "sync", false: "async"}[sync]; mode != want {
				t.Errorf("sync_state = %q, want %q", mode, want)
			}
			if _, err := conn.Exec(ctx, "CREATE TABLE t (x int); INSERT INTO t VALUES (1)"); err != nil {
				t.Fatal(err)
			}
			conn.Close(ctx)
			if err := c.WaitStreaming(30 * time.Second); err != nil {
				t.Fatal(err)
			}
			if err := c.Failover("fast"); err != nil {
				t.Fatal(err)
			}
			conn, err = pgx.Connect(ctx, c.DSN())
			if err != nil {
				t.Fatalf("two-host DSN after the failover: %v", err)
			}
			defer conn.Close(ctx)
			if err := conn.QueryRow(ctx, "SELECT current_setting('port')::int").Scan(&port); err != nil || port != c.Standby.Port {
				t.Fatalf("after the failover the DSN reached port %d (%v), want the promoted standby's %d", port, err, c.Standby.Port)
			}
			var n int
			if _, err := conn.Exec(ctx, "INSERT INTO t VALUES (2)"); err != nil {
				t.Fatalf("write on the promoted standby: %v", err)
			}
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM t").Scan(&n); err != nil || n != 2 {
				t.Fatalf("rows on the promoted standby = %d (%v), want 2", n, err)
			}
		})
	}
}
