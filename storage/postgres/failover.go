package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Failover: a DSN may name several hosts (host=a,b port=p,q or
// postgres://u@a:p,b:q/db) with target_session_attrs=read-write; pgx then
// opens each new connection on whichever host accepts writes. What pgx does
// not do is leave a host it is already connected to: after a failover the
// pool still holds connections to the old primary, dead (it crashed or was
// stopped) or alive but read-only (fenced, or demoted to a standby), and
// each would fail one request more. The store therefore
//
//   - closes a connection whose write was refused as read-only (SQLSTATE
//     25006), as pgx closes one on a FATAL error; such a write maps to
//     storage.ErrNotCommitted (it had no effect);
//   - whenever a connection broke while in use, checks every idle
//     connection at once (SHOW transaction_read_only) and closes those that
//     fail or are read-only, so the next requests open connections to the
//     new primary instead of finding the rest of the dead ones one by one.

// sweepPause is the least time between two sweeps of the idle connections.
const sweepPause = 500 * time.Millisecond

// watchFailover installs the hooks on cfg for s.
func watchFailover(s *Store, cfg *pgxpool.Config) {
	prev := cfg.ConnConfig.OnPgError
	cfg.ConnConfig.OnPgError = func(c *pgconn.PgConn, e *pgconn.PgError) bool {
		if e.Code == codeReadOnly {
			return false
		}
		if prev != nil {
			return prev(c, e)
		}
		return true
	}
	// BeforeClose runs for every connection the pool destroys; one that is
	// closed already broke while in use (a network error, a FATAL error, a
	// read-only refusal, a canceled query). Expiry and Close reach it open.
	cfg.BeforeClose = func(c *pgx.Conn) {
		if c.IsClosed() {
			s.sweepIdle()
		}
	}
}

// sweepIdle checks the idle connections in the background, one sweep at a
// time, at most one per sweepPause.
func (s *Store) sweepIdle() {
	if s.closed.Load() || !s.sweeping.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer s.sweeping.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		for _, c := range s.pool.AcquireAllIdle(ctx) {
			var ro string
			if err := c.QueryRow(ctx, "SHOW transaction_read_only").Scan(&ro); err != nil || ro == "on" {
				_ = c.Conn().Close(ctx)
			}
			c.Release()
		}
		select {
		case <-time.After(sweepPause):
		case <-s.done:
		}
	}()
}
