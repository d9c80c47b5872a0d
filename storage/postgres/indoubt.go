package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/comfygate/comfygate/storage"
)

// In-doubt creates. A create (CreateJob's autocommit statement,
// CreateAsset's COMMIT) whose connection broke after the commit was sent
// and before the server answered has an unknown outcome: the server may
// have committed it, may still be committing it, or may have aborted it.
// The contract then keeps the Idempotency-Key, so a client whose create
// did not in fact happen would have its retry refused as a key reuse with
// nothing to poll. The gateway chooses the row's id before the insert, so
// the store learns the outcome instead, on another connection, within
// inDoubtBound:
//
//   - when the new connection reaches the same server (same remote
//     address) as the broken one, it first waits until the broken
//     connection's backend (its PID, read before the statement) has left
//     pg_stat_activity. A backend ends its transaction (commits it, or
//     aborts it) before its entry goes, and Postgres does not notice a
//     closed socket in the middle of a commit, so once it is gone the
//     outcome is settled; a plain SELECT could instead run while the
//     commit is still in flight (for example waiting for a synchronous
//     standby's acknowledgement) and miss a row that then commits.
//   - a server that is a standby (pg_is_in_recovery) is not asked: its
//     connection is closed and the probe retried until a primary answers.
//   - on a different server (the standby promoted after a failover) the
//     original backend cannot commit anything on the new server's
//     timeline, so the row is there exactly when the commit reached it.
//   - then one SELECT by the create's id (and owner, and idempotency key
//     for jobs) decides: found → the create committed and is answered as a
//     success; absent → storage.ErrNotCommitted (the idempotency layer
//     frees the key and the client's retry runs).
//
// When no answer comes within inDoubtBound (no primary accepts writes, or
// the original backend is still waiting, e.g. for a synchronous standby
// that is gone), the outcome stays unknown and the original error is
// returned, annotated, as before: the key is kept.
//
// pg_xact_status(txid) was considered and not used: the autocommit job
// insert cannot read its txid before it commits without an extra round
// trip, and after a failover the promoted standby may hand the same txid
// to a new transaction when the original one's WAL never reached it, so
// the status would be another transaction's.

// inDoubtBound bounds how long a create with an unknown outcome waits to
// learn it (it covers a standby's promotion after a primary stops).
const inDoubtBound = 10 * time.Second

// inDoubtPause is the wait between two probes.
const inDoubtPause = 100 * time.Millisecond

// session names the server backend a statement was sent to.
type session struct {
	addr string // the connection's remote address
	pid  uint32
}

// sessionOf returns c's session.
func sessionOf(c *pgx.Conn) session {
	s := session{pid: c.PgConn().PID()}
	if nc := c.PgConn().Conn(); nc != nil {
		s.addr = nc.RemoteAddr().String()
	}
	return s
}

// inDoubt reports whether err, from a statement that commits, leaves its
// outcome unknown: the statement was sent and the server gave no answer
// (an error the server sent means it aborted).
func inDoubt(err error) bool {
	return inDoubtCommit(err) && !notSent(err)
}

// inDoubtCommit is inDoubt for the error of a COMMIT (pgx's tx.Commit).
// It does not trust SafeToRetry: pgx v5.12 answers a COMMIT whose
// connection broke after the COMMIT was written with "conn closed", a
// SafeToRetry error (the simple protocol's result reader finds the
// connection closed by its own failed read), so only an answer from the
// server settles it. A COMMIT that truly never left is settled by the
// probe too (its transaction is absent).
func inDoubtCommit(err error) bool {
	var pgErr *pgconn.PgError
	return err != nil && !errors.As(err, &pgErr) && !errors.Is(err, pgx.ErrTxCommitRollback)
}

// errBackendRunning is a probe's answer while the original backend still
// runs on the probed server.
var errBackendRunning = errors.New("the backend of the broken connection is still running")

// learnOutcome waits (within inDoubtBound, on a context detached from
// ctx's cancellation) until find can tell whether the create sent on sess
// committed; find runs on a connection to a primary, after the original
// backend is gone when that primary is the same server, and reports
// whether the create's row exists. An error means the outcome stays
// unknown.
func (s *Store) learnOutcome(ctx context.Context, sess session, find func(context.Context, *pgxpool.Conn) (bool, error)) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), inDoubtBound)
	defer cancel()
	for {
		found, err := s.probe(ctx, sess, find)
		if err == nil {
			return found, nil
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("outcome still unknown after %s: %w", inDoubtBound, err)
		case <-time.After(inDoubtPause):
		}
	}
}

// probe is one attempt of learnOutcome.
func (s *Store) probe(ctx context.Context, sess session, find func(context.Context, *pgxpool.Conn) (bool, error)) (bool, error) {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, err
	}
	defer c.Release()
	same := sessionOf(c.Conn()).addr == sess.addr
	var standby, running bool
	if err := c.QueryRow(ctx, `SELECT pg_is_in_recovery(), $1::bool AND EXISTS (SELECT 1 FROM pg_stat_activity
		WHERE pid = $2::int AND pid <> pg_backend_pid())`, same, int64(sess.pid)).Scan(&standby, &running); err != nil {
		return false, err
	}
	if standby {
		_ = c.Conn().Close(ctx) // the pool drops it; the next one goes to a primary
		return false, errors.New("the server is a standby")
	}
	if running {
		return false, errBackendRunning
	}
	// A statement of its own: its snapshot is taken after the backend was
	// seen gone.
	return find(ctx, c)
}

// resolveJob settles a CreateJob of j whose statement, sent on sess,
// failed with cause and an unknown outcome (see the top of this file).
func (s *Store) resolveJob(ctx context.Context, j storage.NewJob, sess session, cause error) (storage.Job, error) {
	var job storage.Job
	found, err := s.learnOutcome(ctx, sess, func(ctx context.Context, c *pgxpool.Conn) (bool, error) {
		var created, expires time.Time
		var pos int
		err := c.QueryRow(ctx, `SELECT j.created_at, j.expires_at, coalesce(`+queuePositionOfJ+`, 0)
			FROM jobs j WHERE j.id = $1 AND j.account_id = $2 AND j.idempotency_key IS NOT DISTINCT FROM $3`,
			j.ID, j.AccountID, nullKey(j.IdempotencyKey)).Scan(&created, &expires, &pos)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		job = committedJob(j, created, expires, pos)
		return true, nil
	})
	switch {
	case err != nil:
		// Not mapErr: a probe's connection error must not read as ErrNotSent.
		return storage.Job{}, fmt.Errorf("postgres: create job: %w (%v)", cause, err)
	case !found:
		return storage.Job{}, fmt.Errorf("postgres: create job: in doubt, not committed: %w: %w", storage.ErrNotCommitted, cause)
	}
	return job, nil
}

// committedJob is the Job a create of j returns, from what the insert
// returned.
func committedJob(j storage.NewJob, created, expires time.Time, pos int) storage.Job {
	return storage.Job{
		ID: canonicalUUID(j.ID), AccountID: j.AccountID, Pool: j.Pool, DeploymentID: j.DeploymentID,
		Status: storage.JobQueued, Workflow: append([]byte(nil), j.Workflow...),
		CreatedAt: created.UTC(), ExpiresAt: expires.UTC(), Outputs: []storage.Output{},
		QueuePosition: pos, Credits: newJobCredits(j),
	}
}

// nullKey maps "" to SQL NULL for an idempotency key.
func nullKey(k string) *string {
	if k == "" {
		return nil
	}
	return &k
}

// resolveAsset settles a CreateAsset whose COMMIT, sent on sess, failed
// with cause and an unknown outcome: created (what the transaction
// wrote) when it committed.
func (s *Store) resolveAsset(ctx context.Context, a storage.NewAsset, created storage.Created, sess session, cause error) (storage.Created, error) {
	found, err := s.learnOutcome(ctx, sess, func(ctx context.Context, c *pgxpool.Conn) (bool, error) {
		var found bool
		err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE id = $1 AND account_id = $2)`,
			a.ID, a.AccountID).Scan(&found)
		return found, err
	})
	switch {
	case err != nil:
		return storage.Created{}, fmt.Errorf("postgres: create asset: commit: %w (%v)", cause, err)
	case !found:
		// The object the create published is an orphan: the orphan sweep
		// removes it, as after any create that did not commit.
		return storage.Created{}, fmt.Errorf("postgres: create asset: commit in doubt, not committed: %w: %w", storage.ErrNotCommitted, cause)
	}
	return created, nil
}

// resolveBatch settles a batch statement of reqs, sent on sess, that
// failed with cause and an unknown outcome: the jobs found are marked
// inserted; when the outcome cannot be learned every request fails with
// the annotated cause (keeping its key). The others are retried alone as
// after any failed batch: the statement did not commit, or committed
// without them (a duplicate or a bound), and the single-row statement
// gives their own answer.
func (s *Store) resolveBatch(ctx context.Context, reqs []*createReq, sess session, cause error) {
	ids := make([]string, len(reqs))
	for i, r := range reqs {
		ids[i] = r.j.ID
	}
	type row struct {
		id, account, key string
		created, expires time.Time
		pos              int
	}
	var got []row
	_, err := s.learnOutcome(ctx, sess, func(ctx context.Context, c *pgxpool.Conn) (bool, error) {
		got = got[:0]
		rows, err := c.Query(ctx, `SELECT j.id::text, j.account_id, coalesce(j.idempotency_key, ''), j.created_at,
			j.expires_at, coalesce(`+queuePositionOfJ+`, 0) FROM jobs j WHERE j.id = ANY($1::uuid[])`, ids)
		if err != nil {
			return false, err
		}
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.id, &r.account, &r.key, &r.created, &r.expires, &r.pos); err != nil {
				rows.Close()
				return false, err
			}
			got = append(got, r)
		}
		return len(got) > 0, rows.Err()
	})
	if err != nil {
		for _, r := range reqs {
			r.unknown = fmt.Errorf("postgres: create job: %w (%v)", cause, err)
		}
		return
	}
	for _, g := range got {
		for _, r := range reqs {
			if canonicalUUID(r.j.ID) == g.id && r.j.AccountID == g.account && r.j.IdempotencyKey == g.key {
				r.job, r.inserted = committedJob(r.j, g.created, g.expires, g.pos), true
			}
		}
	}
}
