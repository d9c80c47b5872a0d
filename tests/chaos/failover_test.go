package chaos

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest/pgcluster"
)

// Partition is how long the standby's replication connection is cut
// (closed and refused, through a proxy) before the primary crashes: the
// standby falls that far behind, as one across a flaky link does, so an
// asynchronous standby misses the primary's last commits. (Without it, a
// standby on loopback receives every WAL record before its commit is
// acknowledged, and an asynchronous failover loses nothing by luck.)
const Partition = time.Second

// failover is a scenario on a primary and a streaming standby of its own
// (pgcluster), the gateways on a DSN naming both (target_session_attrs=
// read-write): under the workload, the primary crashes (pg_ctl stop -m
// immediate) and the standby is promoted (pg_ctl promote). Nobody touches
// the gateways. Recovery is timed from the crash.
func failover(t *testing.T, sync bool) {
	repl := NewFaults(t)
	c := pgcluster.Start(t, pgcluster.Options{Sync: sync, Via: func(primary string) string {
		return repl.Add(t, "replication", primary).Addr
	}})
	var crashed time.Time
	mode := map[bool]string{true: "synchronous", false: "asynchronous"}[sync]
	name := "postgres failover, " + mode
	sc := scenario(name, fmt.Sprintf("%s standby cut off from the primary for %s, then the primary crashed (pg_ctl stop "+
		"-m immediate) and the standby promoted (pg_ctl promote), under load; two gateways on a two-host DSN; recovery "+
		"timed from the crash", mode, Partition), Partition,
		func(ctx context.Context, t *testing.T, s *Stack) error {
			// Down, not a blackhole: a walsender writing into a silent
			// link holds the crashed primary's shutdown for
			// wal_sender_timeout (60 s), which a real crash does not.
			repl.Proxy("replication").Down()
			<-ctx.Done()
			crashed = time.Now()
			if err := c.Primary.Stop("immediate"); err != nil {
				return err
			}
			stopped := time.Now()
			if err := c.Promote(); err != nil {
				return err
			}
			t.Logf("primary stopped in %s, standby promoted in %s", stopped.Sub(crashed).Round(time.Millisecond),
				time.Since(stopped).Round(time.Millisecond))
			return nil
		})
	sc.Gateways = 2
	sc.Heal = func(*testing.T, *Stack) error { return nil }
	sc.RecoverFrom = func() time.Time { return crashed }
	sc.Warm = pick(4*time.Second, 20*time.Second)
	sc.After = pick(4*time.Second, 20*time.Second)
	if !sync {
		// What an asynchronous standby had not received when the primary
		// crashed is gone: acknowledged creates are missing, acknowledged
		// deletes undone (the asset is back), and a delete's removal of
		// the bytes from the object store, which no rollback undoes, left
		// a blob row naming a missing object; a job whose end was among the
		// lost commits is back at queued or running (and runs again).
		sc.Open = append(sc.Open, "was answered 2xx but storage has none", "want 200 with the",
			"after a delete answered it", "blob rows whose object is missing", "was succeeded, then")
		sc.OpenLimit = 1000
	}
	Run(t, sc, StackOptions{Postgres: c.DSN()})
}

// TestPostgresFailoverSync: with synchronous replication a commit is
// acknowledged only once the standby has it, so the promotion loses
// nothing acknowledged.
func TestPostgresFailoverSync(t *testing.T) { sideBySide(t); failover(t, true) }

// TestPostgresFailoverAsync: with asynchronous replication the commits
// the standby had not received are lost; the row counts them.
func TestPostgresFailoverAsync(t *testing.T) { sideBySide(t); failover(t, false) }
