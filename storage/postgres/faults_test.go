package postgres_test

import (
	"net/url"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/pgtest/pgfault"
	"github.com/comfygate/comfygate/storage/storetest"
)

// TestFaultMatrix runs the conformance suite's fault matrix (issue 37) on
// the Postgres store, through a wire-protocol proxy (pgfault) between the
// store and the server. A proxy rather than a pgx tracer or a wrapped
// transaction: the faults are then real ones on a real connection (a
// server's error answer, a connection cut before a statement, a
// connection cut while the server committed), so pgx answers each with
// the error it gives in production, and the store's reading of those
// errors (which ones mean "not sent", which leave the outcome in doubt)
// is what is under test.
func TestFaultMatrix(t *testing.T) {
	storetest.RunFaults(t, "postgres", func(t *testing.T) (storage.Store, storetest.Faults) {
		dsn := pgtest.DSN(t)
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		proxy := pgfault.Start(t, u.Host)
		u.Host = proxy.Addr()
		// The store under test writes through the proxy; migrations go
		// straight, so that only the store's own statements are counted.
		migrated := openStore(t, dsn)
		if err := migrated.Migrate(testCtx(t)); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return openStore(t, u.String()), pgFaults{proxy}
	})
}

// pgFaults adapts the proxy to storetest.Faults.
type pgFaults struct{ p *pgfault.Proxy }

func (f pgFaults) Arm(n int, kind storetest.FaultKind) {
	f.p.Arm(n, map[storetest.FaultKind]pgfault.Kind{
		storetest.FaultRefuse:     pgfault.Refuse,
		storetest.FaultLose:       pgfault.Lose,
		storetest.FaultLoseAnswer: pgfault.LoseAnswer,
	}[kind])
}

func (f pgFaults) Disarm() string { return f.p.Disarm() }
func (f pgFaults) Sent() int      { return f.p.Sent() }
