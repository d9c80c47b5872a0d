package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/storage/storetest"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a Store on dsn (without migrating) and closes it when the
// test ends, before pgtest drops the schema.
func openStore(t *testing.T, dsn string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(testCtx(t), dsn)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// freshStore returns a migrated store in a schema of its own.
func freshStore(t *testing.T) *postgres.Store {
	t.Helper()
	st := openStore(t, pgtest.DSN(t))
	if err := st.Migrate(testCtx(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	return st
}

func TestConformance(t *testing.T) {
	storetest.RunStore(t, func(t *testing.T) storage.Store { return freshStore(t) })
}

// TestOpenDoesNotConnect: building a store must work with the database down,
// so that `caddy validate` can run offline. Port 1 refuses connections.
func TestOpenDoesNotConnect(t *testing.T) {
	tests := []struct {
		name    string
		dsn     string
		wantErr bool
	}{
		{"unreachable server", "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", false},
		{"malformed dsn", "postgres://%zz", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, err := postgres.Open(testCtx(t), tc.dsn)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Open err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			defer st.Close()
			// The failure surfaces on first use, wrapped, not as a sentinel.
			_, err = st.GetAsset(testCtx(t), "acct", uuid.NewString())
			if err == nil || errors.Is(err, storage.ErrNotFound) {
				t.Errorf("GetAsset on an unreachable server: err = %v, want a connection error", err)
			}
		})
	}
}

// TestMigrateTwoStoresConcurrently runs Migrate from two separate pools (two
// "processes") on one schema at once, twice over: the advisory lock must make
// each migration apply exactly once.
func TestMigrateTwoStoresConcurrently(t *testing.T) {
	dsn := pgtest.DSN(t)
	stores := []*postgres.Store{openStore(t, dsn), openStore(t, dsn)}
	for round := range 2 {
		var wg sync.WaitGroup
		errs := make([]error, len(stores))
		for i, st := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = st.Migrate(testCtx(t))
			}()
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d: store %d: Migrate: %v", round, i, err)
			}
		}
	}
	var versions, distinct int
	err := stores[0].Pool().QueryRow(testCtx(t),
		`SELECT count(*), count(DISTINCT version) FROM schema_migrations`).Scan(&versions, &distinct)
	if err != nil {
		t.Fatalf("read schema_migrations: %v", err)
	}
	if versions == 0 || versions != distinct {
		t.Errorf("schema_migrations has %d rows over %d versions, want each version once", versions, distinct)
	}
	// The lock is released: a third Migrate on either pool does not block.
	if err := stores[1].Migrate(testCtx(t)); err != nil {
		t.Errorf("Migrate after the race: %v", err)
	}
}

// memFS is the in-memory file set: publish adds a hash, remove deletes it.
// It also counts the assets the test knows to be live per hash (created and
// returned, delete not yet begun) and records a violation when remove runs
// while one exists: with the blob row held across remove, that cannot happen.
type memFS struct {
	mu         sync.Mutex
	present    map[string]bool
	fail       map[string]bool // hashes whose remove fails
	live       map[string]int
	violations []string
	// removeHold widens the race window: remove sleeps this long before
	// deleting, which a store that released the blob's row early would let a
	// concurrent create slip into.
	removeHold time.Duration
}

func newMemFS() *memFS {
	return &memFS{present: map[string]bool{}, fail: map[string]bool{}, live: map[string]int{}}
}

// publish is the publisher of a create of hash's bytes at their address.
func (m *memFS) publish(hash string) storage.Publisher {
	return storage.PublishFunc(func(*blob.Ref) (blob.Ref, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		m.present[hash] = true
		return blob.Ref{Hash: hash}, nil
	})
}

func (m *memFS) remove(obj blob.Ref) error {
	hash := obj.Hash
	time.Sleep(m.removeHold)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail[hash] {
		return fmt.Errorf("remove %s: permission denied", hash)
	}
	if n := m.live[hash]; n > 0 {
		m.violations = append(m.violations, fmt.Sprintf("remove(%s) while %d live assets reference it", hash, n))
	}
	delete(m.present, hash)
	return nil
}

// markLive adjusts the live count; call with +1 after a create returns and
// -1 before starting the delete.
func (m *memFS) markLive(hash string, delta int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live[hash] += delta
}

func (m *memFS) has(hash string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.present[hash]
}

func newAsset(account, hash string, exp *time.Time) storage.NewAsset {
	return storage.NewAsset{
		ID: uuid.NewString(), AccountID: account, Hash: hash, SizeBytes: 10,
		ContentType: "image/png", FilePath: "x.png", ExpiresAt: exp,
	}
}

// checkRefs asserts the invariant behind the protocol: every blob row's refs
// equals the number of assets over it, and no blob row is unreferenced.
func checkRefs(t *testing.T, st *postgres.Store) {
	t.Helper()
	var bad int
	err := st.Pool().QueryRow(testCtx(t), `SELECT count(*) FROM blobs b
		WHERE b.refs <> (SELECT count(*) FROM assets a WHERE a.hash = b.hash) OR b.refs = 0`).Scan(&bad)
	if err != nil {
		t.Fatalf("check refs: %v", err)
	}
	if bad != 0 {
		t.Errorf("%d blob rows whose refs disagree with their assets", bad)
	}
}

// TestRefcountUnderRace races creates and deletes of the same bytes: pairs of
// goroutines share each hash, so its reference count keeps falling to zero
// (remove runs) while the partner is creating. Every asset a goroutine holds
// must have its bytes present, remove must never run while a known-live
// asset references the hash, and the refs column must match the rows.
func TestRefcountUnderRace(t *testing.T) {
	st := freshStore(t)
	fs := newMemFS()
	fs.removeHold = 2 * time.Millisecond
	const workers, rounds = 6, 15
	account := uuid.NewString()
	hashes := []string{"blake3:a-" + uuid.NewString(), "blake3:b-" + uuid.NewString(), "blake3:c-" + uuid.NewString()}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		live []storage.Asset
	)
	for w := range workers {
		hash := hashes[w%len(hashes)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				c, err := st.CreateAsset(testCtx(t), newAsset(account, hash, nil), fs.publish(hash))
				if err != nil {
					t.Errorf("CreateAsset: %v", err)
					return
				}
				fs.markLive(hash, 1)
				// The asset is live until this goroutine deletes it, so
				// its bytes must be present now, whatever others did.
				if !fs.has(hash) {
					t.Errorf("worker %d round %d: bytes missing right after CreateAsset", w, r)
				}
				if r == rounds-1 && w < len(hashes) { // one survivor per hash
					mu.Lock()
					live = append(live, c.Asset)
					mu.Unlock()
					continue
				}
				fs.markLive(hash, -1)
				if err := st.DeleteAsset(testCtx(t), account, c.Asset.ID, fs.remove); err != nil {
					t.Errorf("DeleteAsset: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	for _, v := range fs.violations {
		t.Error(v)
	}
	checkRefs(t, st)
	for _, a := range live {
		if !fs.has(a.Hash) {
			t.Errorf("live asset %s: bytes %s gone", a.ID, a.Hash)
		}
	}
	for _, a := range live {
		fs.markLive(a.Hash, -1)
		if err := st.DeleteAsset(testCtx(t), account, a.ID, fs.remove); err != nil {
			t.Fatalf("DeleteAsset(%s): %v", a.ID, err)
		}
		if fs.has(a.Hash) {
			t.Errorf("bytes %s present after their last asset was deleted", a.Hash)
		}
	}
	checkRefs(t, st)
}

// TestDeleteExpiredRemoveFailure: the batch is reaped whole even when a
// blob's remove fails (its assets' delete had committed); those bytes stay
// for RemoveUnreferencedBlobs, and the error is returned.
func TestDeleteExpiredRemoveFailure(t *testing.T) {
	st := freshStore(t)
	fs := newMemFS()
	past := time.Now().Add(-time.Hour)
	account := uuid.NewString()
	stuck, fine := "blake3:stuck-"+uuid.NewString(), "blake3:fine-"+uuid.NewString()
	var ids = map[string]string{}
	for _, h := range []string{stuck, fine} {
		c, err := st.CreateAsset(testCtx(t), newAsset(account, h, &past), fs.publish(h))
		if err != nil {
			t.Fatalf("CreateAsset: %v", err)
		}
		ids[h] = c.Asset.ID
	}
	fs.fail[stuck] = true
	n, err := st.DeleteExpiredAssets(testCtx(t), time.Now(), 10, fs.remove)
	if n != 2 || err == nil {
		t.Fatalf("DeleteExpiredAssets = %d, %v; want 2 and the remove error", n, err)
	}
	for h, id := range ids {
		if _, err := st.GetAsset(testCtx(t), account, id); !errors.Is(err, storage.ErrNotFound) {
			t.Errorf("asset over %s after the reap: %v, want ErrNotFound", h, err)
		}
	}
	if fs.has(fine) || !fs.has(stuck) {
		t.Errorf("present: fine=%v stuck=%v; want false, true", fs.has(fine), fs.has(stuck))
	}
	var unreferenced []string
	rows, err := st.Pool().Query(testCtx(t), `SELECT hash FROM blobs WHERE refs = 0`)
	if err != nil {
		t.Fatal(err)
	}
	if unreferenced, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(unreferenced) != 1 || unreferenced[0] != stuck {
		t.Errorf("unreferenced blob rows = %v, want only %s (its bytes are still to go)", unreferenced, stuck)
	}

	delete(fs.fail, stuck)
	if n, err := st.RemoveUnreferencedBlobs(testCtx(t), 10, fs.remove); n != 1 || err != nil {
		t.Errorf("RemoveUnreferencedBlobs = %d, %v; want 1, nil", n, err)
	}
	if fs.has(stuck) {
		t.Error("stuck blob still present after the sweep")
	}
	checkRefs(t, st)
}

// TestMalformedIDs: ids Postgres could not parse as UUIDs answer like
// missing records, never as driver errors.
func TestMalformedIDs(t *testing.T) {
	st := freshStore(t)
	fs := newMemFS()
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"GetAsset", func() error { _, err := st.GetAsset(testCtx(t), "a", "not-a-uuid"); return err }, storage.ErrNotFound},
		{"DeleteAsset", func() error { return st.DeleteAsset(testCtx(t), "a", "not-a-uuid", fs.remove) }, storage.ErrNotFound},
	}
	for _, tc := range tests {
		if err := tc.call(); !errors.Is(err, tc.want) {
			t.Errorf("%s: err = %v, want %v", tc.name, err, tc.want)
		}
	}
	bad := newAsset("a", "blake3:x", nil)
	bad.ID = "not-a-uuid"
	if _, err := st.CreateAsset(testCtx(t), bad, fs.publish(bad.Hash)); err == nil {
		t.Error("CreateAsset with a malformed ID succeeded")
	}
	if fs.has("blake3:x") {
		t.Error("publish ran for a refused create")
	}
}
