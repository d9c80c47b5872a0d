// Package postgres is the production storage.Store: Postgres through a pgx
// connection pool. It is the source of truth; Redis (storage/redisclaim) only
// holds losable claims beside it.
//
// Blob bytes live outside the database (storage/blob). The store keeps a
// reference-counted row per blob and calls the caller's publish/remove
// functions while it holds that row's lock, so a create and a delete of the
// same bytes cannot interleave between the file system and the database.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/internal/combine"
)

// Store is a storage.Store on a pgx pool.
type Store struct {
	pool *pgxpool.Pool
	// creates batches concurrent CreateJobs (jobs_batch.go).
	creates *combine.Combiner[*createReq]
	// sweeping is set while sweepIdle runs (failover.go).
	sweeping atomic.Bool
	closed   atomic.Bool
	done     chan struct{}
}

var _ storage.Store = (*Store)(nil)

// defaultMaxConns is the connection pool size unless the DSN sets
// pool_max_conns.
const defaultMaxConns = 32

// Open parses dsn and builds a pool without connecting: connections are made
// on first use, so a configuration can be validated (caddy validate) while
// the database is unreachable. A malformed DSN is still an error here. Do not
// set pool_min_conns in the DSN if that property matters: the pool would then
// dial in the background.
func Open(ctx context.Context, dsn string) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors redact the password.
		return nil, fmt.Errorf("postgres: parse dsn: %w", err)
	}
	if !strings.Contains(dsn, "pool_max_conns") {
		// pgx's default (4 on a small machine) makes concurrent submissions
		// queue for a connection and so never share a commit; a gateway's
		// requests mostly wait on the database, not the CPU.
		cfg.MaxConns = defaultMaxConns
	}
	s := &Store{done: make(chan struct{})}
	watchFailover(s, cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: new pool: %w", err)
	}
	s.pool = pool
	s.creates = newCreateBatcher(s)
	return s, nil
}

// Pool exposes the underlying pool for packages that add their own tables
// through later migrations (jobs) and for tests.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// Close closes the pool, waiting for acquired connections to be released.
func (s *Store) Close() error {
	if !s.closed.Swap(true) && s.done != nil {
		close(s.done)
	}
	s.pool.Close()
	return nil
}

// Ping runs a round trip to the server on a pooled connection.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: ping: %w", err)
	}
	return nil
}

// Postgres SQLSTATE codes the store branches on.
const (
	codeUniqueViolation     = "23505"
	codeForeignKeyViolation = "23503"
	// codeReadOnly is read_only_sql_transaction: a write reached a server
	// that is (now) a standby or fenced read-only, and was refused.
	codeReadOnly = "25006"
)

// mapErr wraps a driver error for op, adding the storage sentinel a caller
// branches on when there is one. The driver error stays in the chain.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: %s: %w", op, storage.ErrNotFound)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case codeUniqueViolation:
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrDuplicate, err)
		case codeForeignKeyViolation:
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrInUse, err)
		case codeReadOnly:
			// The server refused the transaction's write: nothing of it
			// can have taken effect.
			return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrNotCommitted, err)
		}
	}
	if notSent(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrNotSent, err)
	}
	return fmt.Errorf("postgres: %s: %w", op, err)
}

// notSent reports whether err failed before anything was sent to the
// server: a failed connection attempt, or what pgconn.SafeToRetry names.
func notSent(err error) bool {
	var ce *pgconn.ConnectError
	return errors.As(err, &ce) || pgconn.SafeToRetry(err)
}

// commitErr maps the error of a COMMIT (pgx's tx.Commit). An error the
// server sent means it rolled the transaction back (a deferred constraint,
// a serialization failure): storage.ErrNotCommitted, with mapErr's
// sentinels. Any other leaves the outcome unknown, whatever pgx calls it
// (see inDoubtCommit): storage.ErrInDoubt, never ErrNotSent.
func commitErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if inDoubtCommit(err) {
		return fmt.Errorf("postgres: %s: %w: %w", op, storage.ErrInDoubt, err)
	}
	return fmt.Errorf("%w: %w", storage.ErrNotCommitted, mapErr(op, err))
}

// isUUID reports whether s is a UUID in a form Postgres accepts. Lookups by a
// malformed id answer ErrNotFound rather than a driver error.
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// nullUUID maps "" to SQL NULL for optional uuid columns.
func nullUUID(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// utcPtr converts a scanned nullable timestamp to UTC.
func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

// rollback ends a transaction that did not commit. It runs even when ctx is
// already canceled so the connection goes back to the pool clean; a failure
// is ignored because pgx closes the connection, which aborts the transaction.
func rollback(ctx context.Context, tx pgx.Tx) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(rctx)
}
