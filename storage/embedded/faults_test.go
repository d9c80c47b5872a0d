package embedded

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"modernc.org/sqlite"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/storetest"
)

// TestFaultMatrix runs the conformance suite's fault matrix (issue 37) on
// the embedded store, with a fault injector between the store's writer
// and SQLite: a database/sql driver that wraps SQLite's and fails the
// armed statement. Statements are BEGIN, each Exec and Query the writer
// runs, and COMMIT. A refused or lost statement returns an error without
// running (a refused or lost COMMIT rolls back); a lost answer runs the
// statement (a COMMIT commits) and then returns the error, as an I/O
// error reported after the write would.
func TestFaultMatrix(t *testing.T) {
	storetest.RunFaults(t, "embedded", func(t *testing.T) (storage.Store, storetest.Faults) {
		f := &sqlFaults{}
		name := fmt.Sprintf("sqlite-faults-%d", driverSeq.Add(1))
		sql.Register(name, faultDriver{inner: &sqlite.Driver{}, f: f})
		s, err := open(t.TempDir(), name)
		if err != nil {
			t.Fatalf("open: %v", err)
		}
		t.Cleanup(func() { _ = s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		return s, f
	})
}

var driverSeq atomic.Int64

// errInjected is what a failed statement returns.
var errInjected = errors.New("sqlfault: statement failed on purpose")

// sqlFaults implements storetest.Faults for the fault driver.
type sqlFaults struct {
	mu   sync.Mutex
	sent int
	at   int
	kind storetest.FaultKind
	hit  string
}

func (f *sqlFaults) Arm(n int, kind storetest.FaultKind) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent, f.at, f.kind, f.hit = 0, n, kind, ""
}

func (f *sqlFaults) Disarm() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	hit := f.hit
	f.sent, f.at, f.hit = 0, 0, ""
	return hit
}

func (f *sqlFaults) Sent() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// count counts a statement and returns the fault's kind when it is the
// armed one (0 otherwise).
func (f *sqlFaults) count(query string) storetest.FaultKind {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent++
	if f.at == 0 || f.sent != f.at {
		return 0
	}
	f.at = 0
	f.hit = strings.Join(strings.Fields(query), " ")
	if len(f.hit) > 60 {
		f.hit = f.hit[:60] + "…"
	}
	return f.kind
}

type faultDriver struct {
	inner driver.Driver
	f     *sqlFaults
}

func (d faultDriver) Open(name string) (driver.Conn, error) {
	c, err := d.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: c, f: d.f}, nil
}

type faultConn struct {
	driver.Conn
	f *sqlFaults
}

func (c *faultConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	kind := c.f.count("BEGIN")
	if kind == storetest.FaultRefuse || kind == storetest.FaultLose {
		return nil, errInjected
	}
	tx, err := c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if kind == storetest.FaultLoseAnswer {
		// The transaction began and the caller never learns it: the
		// connection's session ends it, as a server ends a lost one.
		_ = tx.Rollback()
		return nil, errInjected
	}
	return &faultTx{Tx: tx, f: c.f}, nil
}

func (c *faultConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	kind := c.f.count(query)
	if kind == storetest.FaultRefuse || kind == storetest.FaultLose {
		return nil, errInjected
	}
	r, err := c.Conn.(driver.ExecerContext).ExecContext(ctx, query, args)
	if kind == storetest.FaultLoseAnswer {
		return nil, errInjected
	}
	return r, err
}

func (c *faultConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	kind := c.f.count(query)
	if kind == storetest.FaultRefuse || kind == storetest.FaultLose {
		return nil, errInjected
	}
	rows, err := c.Conn.(driver.QueryerContext).QueryContext(ctx, query, args)
	if kind == storetest.FaultLoseAnswer {
		if err == nil {
			// Run it to the end (an UPDATE … RETURNING writes as it
			// steps), then lose what it answered.
			dest := make([]driver.Value, len(rows.Columns()))
			for rows.Next(dest) == nil {
			}
			_ = rows.Close()
		}
		return nil, errInjected
	}
	return rows, err
}

type faultTx struct {
	driver.Tx
	f *sqlFaults
}

func (tx *faultTx) Commit() error {
	switch tx.f.count("COMMIT") {
	case storetest.FaultRefuse, storetest.FaultLose:
		_ = tx.Tx.Rollback()
		return errInjected
	case storetest.FaultLoseAnswer:
		_ = tx.Tx.Commit()
		return errInjected
	}
	return tx.Tx.Commit()
}
