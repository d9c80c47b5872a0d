package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// orphanCases: bytes published by a create whose transaction then failed
// (no record names them) are removed by RemoveOrphanBlobs, and nothing a
// record names, or a create under way is about to name, ever is.
var orphanCases = []storeCase{
	{"RemovesOnlyOrphans", testRemovesOnlyOrphans},
	{"OrphanSweepWaitsForCreate", testOrphanSweepWaitsForCreate},
}

// orphan publishes hash's bytes through a create that then fails, the way a
// commit that never lands leaves them.
func orphan(t *testing.T, st storage.Store, fs *fakeFS, hash string) {
	t.Helper()
	failed := errors.New("the transaction fails after the publish")
	_, err := st.CreateAsset(ctx(t), newAsset(newID(), hash), func(h string) error {
		if err := fs.publish(h); err != nil {
			return err
		}
		return failed
	})
	if !errors.Is(err, failed) || !errors.Is(err, storage.ErrNotCommitted) {
		t.Fatalf("the failing create: %v, want its publish error and ErrNotCommitted", err)
	}
	if !fs.has(hash) {
		t.Fatal("the failing create published nothing")
	}
}

func testRemovesOnlyOrphans(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	kept, lost, other := hashOf("kept"), hashOf("orphan"), hashOf("other orphan")
	a := newAsset(newID(), kept)
	if _, err := st.CreateAsset(ctx(t), a, fs.publish); err != nil {
		t.Fatal(err)
	}
	orphan(t, st, fs, lost)
	orphan(t, st, fs, other)

	n, err := st.RemoveOrphanBlobs(ctx(t), []string{kept, lost}, fs.remove)
	if err != nil || n != 1 {
		t.Fatalf("RemoveOrphanBlobs = %d, %v; want 1", n, err)
	}
	if fs.has(lost) || !fs.has(kept) || !fs.has(other) || fs.removeCount(kept) != 0 {
		t.Fatalf("after the sweep: kept %v, orphan %v, unlisted orphan %v (want true, false, true)",
			fs.has(kept), fs.has(lost), fs.has(other))
	}
	if n, err := st.RemoveOrphanBlobs(ctx(t), []string{kept}, fs.remove); err != nil || n != 0 {
		t.Fatalf("a sweep of recorded bytes = %d, %v; want 0", n, err)
	}
	// The hash is free again: a create of the same bytes publishes them.
	if _, err := st.CreateAsset(ctx(t), newAsset(newID(), lost), fs.publish); err != nil {
		t.Fatal(err)
	}
	if !fs.has(lost) || fs.publishCount(lost) != 2 {
		t.Fatalf("a create after the sweep: present %v, published %d times (want true, 2)", fs.has(lost), fs.publishCount(lost))
	}
	// A remove that fails keeps the orphan and says so.
	broken := errors.New("store down")
	if n, err := st.RemoveOrphanBlobs(ctx(t), []string{other}, func(string) error { return broken }); n != 0 || !errors.Is(err, broken) {
		t.Fatalf("sweep with a failing remove = %d, %v; want 0 and the error", n, err)
	}
	if !fs.has(other) {
		t.Fatal("the orphan went although its remove failed")
	}
	// And no asset was touched.
	if _, err := st.GetAsset(ctx(t), a.AccountID, a.ID); err != nil {
		t.Fatalf("the kept asset: %v", err)
	}
}

// testOrphanSweepWaitsForCreate: a create of bytes that are still an
// orphan's (its publish found them present) is under way while the sweep
// reaches the hash: the sweep must wait for it and leave the bytes.
func testOrphanSweepWaitsForCreate(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("contended")
	orphan(t, st, fs, hash)

	inPublish, release := make(chan struct{}), make(chan struct{})
	created := make(chan error, 1)
	a := newAsset(newID(), hash)
	go func() {
		_, err := st.CreateAsset(ctx(t), a, func(h string) error {
			close(inPublish)
			<-release
			return fs.publish(h)
		})
		created <- err
	}()
	<-inPublish
	swept := make(chan error, 1)
	go func() {
		_, err := st.RemoveOrphanBlobs(ctx(t), []string{hash}, fs.remove)
		swept <- err
	}()
	// Give the sweep time to reach the hash while the create holds it.
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-created; err != nil {
		t.Fatalf("the create: %v", err)
	}
	if err := <-swept; err != nil {
		t.Fatalf("the sweep: %v", err)
	}
	if !fs.has(hash) || fs.removeCount(hash) != 0 {
		t.Fatalf("the sweep removed bytes a create recorded (present %v, removed %d times)", fs.has(hash), fs.removeCount(hash))
	}
	if _, err := st.GetAsset(ctx(t), a.AccountID, a.ID); err != nil {
		t.Fatalf("the created asset: %v", err)
	}
}
