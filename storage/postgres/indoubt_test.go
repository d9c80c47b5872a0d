package postgres_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
)

// cutProxy forwards TCP connections to a Postgres server and cuts them on
// demand: all at once (cutAll), each one right after it forwarded a
// simple-protocol COMMIT (cutAtCommit), or the first one to forward an
// extended-protocol Execute right after the Sync that follows it
// (cutAfterExecute), before the server's answer.
type cutProxy struct {
	l               net.Listener
	target          string
	cutAtCommit     atomic.Bool
	cutAfterExecute atomic.Bool
	// cutBatch is cutAfterExecute for a connection that parsed a
	// multi-row create (its SQL reads unnest).
	cutBatch atomic.Bool
	// dropCancels drops CancelRequests: pgx sends one when a connection
	// breaks under a running statement, and a cancel that arrives in time
	// aborts the statement; the tests that want it to commit after the cut
	// (as it does when the cancel cannot reach the server) drop them.
	dropCancels atomic.Bool
	mu          sync.Mutex
	conns       []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{l: l, target: target}
	go p.serve()
	t.Cleanup(func() { l.Close(); p.cutAll() })
	return p
}

func (p *cutProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(c, s); c.Close() }()
		go p.forward(c, s)
	}
}

// cancelRequestCode opens a CancelRequest message.
const cancelRequestCode = 80877102

// serverLinger is how long a cut connection's server side stays open: the
// server executes what it was sent and its backend lives on meanwhile (a
// closed socket could make it drop the statement unread), so the store's
// probe has to wait for it.
const serverLinger = time.Second

// forward copies the client's messages to the server one by one.
func (p *cutProxy) forward(c, s net.Conn) {
	cut := false
	defer func() {
		c.Close()
		if cut {
			time.AfterFunc(serverLinger, func() { s.Close() })
		} else {
			s.Close()
		}
	}()
	// The startup message has no type byte.
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return
	}
	body := make([]byte, binary.BigEndian.Uint32(n[:])-4)
	if _, err := io.ReadFull(c, body); err != nil {
		return
	}
	if len(body) >= 4 && binary.BigEndian.Uint32(body) == cancelRequestCode && p.dropCancels.Load() {
		return
	}
	if _, err := s.Write(append(n[:], body...)); err != nil {
		return
	}
	executed, batch := false, false
	for {
		var h [5]byte
		if _, err := io.ReadFull(c, h[:]); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint32(h[1:])-4)
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		if _, err := s.Write(append(h[:], body...)); err != nil {
			return
		}
		if h[0] == 'Q' && p.cutAtCommit.Load() && strings.EqualFold(string(bytes.TrimRight(body, "\x00")), "commit") {
			cut = true
			return // the server has the COMMIT; the client gets no answer
		}
		executed = executed || h[0] == 'E'
		if h[0] == 'P' && bytes.Contains(body, []byte("unnest(")) {
			batch, executed = true, false // cut at its execution, not its preparation
		}
		if h[0] == 'S' && executed && (p.cutAfterExecute.CompareAndSwap(true, false) ||
			batch && p.cutBatch.CompareAndSwap(true, false)) {
			cut = true
			return // the server has the statement; the client gets no answer
		}
	}
}

func (p *cutProxy) cutAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// viaProxy returns dsn with its host and port replaced by the proxy's.
func viaProxy(t *testing.T, dsn string, p *cutProxy) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(p.l.Addr().String())
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = net.JoinHostPort(host, port)
		return u.String()
	}
	return dsn + " host=" + host + " port=" + port
}

// inDoubtSetup returns a migrated schema's DSN, a store on it through a
// cutProxy, the proxy, and a direct connection to the schema.
func inDoubtSetup(t *testing.T) (*postgres.Store, *cutProxy, *pgx.Conn, string) {
	t.Helper()
	dsn := pgtest.DSN(t)
	direct := openStore(t, dsn)
	if err := direct.Migrate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := newCutProxy(t, net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))))
	st := openStore(t, viaProxy(t, dsn, p))
	conn, err := pgx.Connect(testCtx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return st, p, conn, dsn
}

// blockedBy waits until a backend waits for a lock that blocker's backend
// holds and returns its PID.
// lockTable holds table in SHARE mode on a connection of its own, so that
// a create's insert waits on it; the caller rolls tx back to let it go.
func lockTable(t *testing.T, dsn, table string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	ctx := testCtx(t)
	blocker, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { blocker.Close(context.Background()) })
	tx, err := blocker.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{table}.Sanitize()+" IN SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	return blocker, tx
}

func blockedBy(t *testing.T, admin *pgx.Conn, blocker *pgx.Conn) uint32 {
	t.Helper()
	ctx := testCtx(t)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		var pid int64
		err := admin.QueryRow(ctx, `SELECT pid FROM pg_stat_activity WHERE $1::int = ANY(pg_blocking_pids(pid)) LIMIT 1`,
			int64(blocker.PgConn().PID())).Scan(&pid)
		if err == nil {
			return uint32(pid)
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
	}
	t.Fatal("the create never waited for the lock")
	return 0
}

// TestCreateInDoubt: a create whose connection is cut after its statement
// or COMMIT reached the server has an unknown outcome at the client. The
// store learns it on another connection, waiting for the original backend
// to finish: success when the create committed (even though it committed
// only after the cut), storage.ErrNotCommitted (the idempotency layer then
// frees the key) when it did not.
func TestCreateInDoubt(t *testing.T) {
	job := func(id string) storage.NewJob {
		return storage.NewJob{ID: id, AccountID: "acct", Pool: "p", Workflow: json.RawMessage(`{"1": {"class_type":"X"}}`),
			ExpiresAt: time.Now().Add(time.Hour), IdempotencyKey: "k-" + id}
	}
	t.Run("job cut right after its statement was sent", func(t *testing.T) {
		st, p, conn, _ := inDoubtSetup(t)
		p.cutAfterExecute.Store(true)
		p.dropCancels.Store(true)
		id := uuid.NewString()
		j, err := st.CreateJob(testCtx(t), job(id))
		if err != nil {
			var n int
			_ = conn.QueryRow(testCtx(t), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n)
			t.Fatalf("CreateJob: %v, want success (the statement reached the server, which committed it); jobs with the id: %d", err, n)
		}
		if j.ID != id || j.Status != storage.JobQueued || j.CreatedAt.IsZero() || j.QueuePosition != 1 {
			t.Errorf("CreateJob answered %+v, want the queued job %s at position 1", j, id)
		}
		var n int
		if err := conn.QueryRow(testCtx(t), `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("jobs with the id: %d (%v), want 1", n, err)
		}
	})
	t.Run("batch of jobs cut right after its statement was sent", func(t *testing.T) {
		st, p, conn, dsn := inDoubtSetup(t)
		p.cutBatch.Store(true)
		p.dropCancels.Store(true)
		ctx := testCtx(t)
		blocker, tx := lockTable(t, dsn, "jobs")
		// The first create runs alone and waits on the lock; the others
		// queue behind it and go out together as one batch.
		ids := []string{uuid.NewString(), uuid.NewString(), uuid.NewString()}
		errs := make(chan error, len(ids))
		go func() { _, err := st.CreateJob(ctx, job(ids[0])); errs <- err }()
		blockedBy(t, conn, blocker)
		for _, id := range ids[1:] {
			go func() {
				j, err := st.CreateJob(ctx, job(id))
				if err == nil && j.ID != id {
					err = errors.New("answered job " + j.ID + ", want " + id)
				}
				errs <- err
			}()
		}
		time.Sleep(200 * time.Millisecond) // let them queue
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		for range ids {
			if err := <-errs; err != nil {
				t.Errorf("CreateJob: %v, want success", err)
			}
		}
		if p.cutBatch.Load() {
			t.Fatal("no batch statement was cut")
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = ANY($1::uuid[])`, ids).Scan(&n); err != nil || n != 3 {
			t.Errorf("jobs: %d (%v), want 3", n, err)
		}
	})
	t.Run("job cut while it waits, then terminated", func(t *testing.T) {
		st, p, conn, dsn := inDoubtSetup(t)
		ctx := testCtx(t)
		blocker, tx := lockTable(t, dsn, "jobs")
		id := uuid.NewString()
		done := make(chan error, 1)
		go func() {
			_, err := st.CreateJob(ctx, job(id))
			done <- err
		}()
		pid := blockedBy(t, conn, blocker)
		p.cutAll()
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend($1::int)`, int64(pid)); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, storage.ErrNotCommitted) {
			t.Fatalf("CreateJob: %v, want ErrNotCommitted", err)
		}
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE id = $1`, id).Scan(&n); err != nil || n != 0 {
			t.Errorf("jobs with the id: %d (%v), want 0", n, err)
		}
	})

	hash := "blake3:00000000000000000000000000000000000000000000000000000000000000bb"
	asset := func(id string) storage.NewAsset {
		return storage.NewAsset{ID: id, AccountID: "acct", Hash: hash, SizeBytes: 1, ContentType: "text/plain",
			FilePath: "a.txt", IdempotencyKey: "k-" + id}
	}
	t.Run("asset cut right after its COMMIT was sent", func(t *testing.T) {
		st, p, conn, _ := inDoubtSetup(t)
		p.cutAtCommit.Store(true)
		p.dropCancels.Store(true)
		id := uuid.NewString()
		c, err := st.CreateAsset(testCtx(t), asset(id), atAddress(hash))
		if err != nil {
			t.Fatalf("CreateAsset: %v, want success (the COMMIT reached the server)", err)
		}
		if c.Asset.ID != id {
			t.Errorf("CreateAsset answered asset %q, want %s", c.Asset.ID, id)
		}
		var n int
		if err := conn.QueryRow(testCtx(t), `SELECT count(*) FROM assets WHERE id = $1`, id).Scan(&n); err != nil || n != 1 {
			t.Errorf("assets with the id: %d (%v), want 1", n, err)
		}
	})
	t.Run("asset cut before its COMMIT", func(t *testing.T) {
		st, p, conn, dsn := inDoubtSetup(t)
		ctx := testCtx(t)
		blocker, tx := lockTable(t, dsn, "assets")
		id := uuid.NewString()
		done := make(chan error, 1)
		go func() {
			_, err := st.CreateAsset(ctx, asset(id), atAddress(hash))
			done <- err
		}()
		blockedBy(t, conn, blocker)
		p.cutAll()
		err := <-done
		_ = tx.Rollback(ctx)
		if !errors.Is(err, storage.ErrNotCommitted) {
			t.Fatalf("CreateAsset: %v, want ErrNotCommitted", err)
		}
	})
}
