package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// orphanCases: objects no record names (bytes published by a create whose
// transaction then failed, an address object whose row names a key) are
// removed by RemoveOrphanBlobs, on both layouts, and nothing a record
// names, or a create under way is about to name, ever is.
var orphanCases = []storeCase{
	{"RemovesOnlyOrphans", testRemovesOnlyOrphans},
	{"RemovesOnlyOrphansOfBothLayouts", testRemovesOnlyOrphansOfBothLayouts},
	{"OrphanSweepWaitsForCreate", testOrphanSweepWaitsForCreate},
	{"OrphanSweepWaitsForKeyedCreate", testOrphanSweepWaitsForKeyedCreate},
}

// failing wraps p so that the create's transaction fails right after the
// publish, the way a commit that never lands leaves the bytes.
type failing struct {
	storage.Publisher
	err error
}

func (f failing) Publish(held *blob.Ref) (blob.Ref, error) {
	if _, err := f.Publisher.Publish(held); err != nil {
		return blob.Ref{}, err
	}
	return blob.Ref{}, f.err
}

// orphan publishes hash's bytes through p in a create that then fails.
func orphan(t *testing.T, st storage.Store, fs *fakeFS, hash string, p storage.Publisher) {
	t.Helper()
	failed := errors.New("the transaction fails after the publish")
	_, err := st.CreateAsset(ctx(t), newAsset(newID(), hash), failing{p, failed})
	if !errors.Is(err, failed) || !errors.Is(err, storage.ErrNotCommitted) {
		t.Fatalf("the failing create: %v, want its publish error and ErrNotCommitted", err)
	}
	if !fs.has(hash) {
		t.Fatal("the failing create published nothing")
	}
}

func addr(hash string) blob.Ref { return blob.Ref{Hash: hash} }

func testRemovesOnlyOrphans(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	kept, lost, other := hashOf("kept"), hashOf("orphan"), hashOf("other orphan")
	a := newAsset(newID(), kept)
	if _, err := st.CreateAsset(ctx(t), a, fs.publish(kept)); err != nil {
		t.Fatal(err)
	}
	orphan(t, st, fs, lost, fs.publish(lost))
	orphan(t, st, fs, other, fs.publish(other))

	n, err := st.RemoveOrphanBlobs(ctx(t), []blob.Ref{addr(kept), addr(lost)}, fs.remove)
	if err != nil || n != 1 {
		t.Fatalf("RemoveOrphanBlobs = %d, %v; want 1", n, err)
	}
	if fs.has(lost) || !fs.has(kept) || !fs.has(other) || fs.removeCount(kept) != 0 {
		t.Fatalf("after the sweep: kept %v, orphan %v, unlisted orphan %v (want true, false, true)",
			fs.has(kept), fs.has(lost), fs.has(other))
	}
	if n, err := st.RemoveOrphanBlobs(ctx(t), []blob.Ref{addr(kept)}, fs.remove); err != nil || n != 0 {
		t.Fatalf("a sweep of recorded bytes = %d, %v; want 0", n, err)
	}
	// The hash is free again: a create of the same bytes publishes them.
	if _, err := st.CreateAsset(ctx(t), newAsset(newID(), lost), fs.publish(lost)); err != nil {
		t.Fatal(err)
	}
	if !fs.has(lost) || fs.publishCount(lost) != 2 {
		t.Fatalf("a create after the sweep: present %v, published %d times (want true, 2)", fs.has(lost), fs.publishCount(lost))
	}
	// A remove that fails keeps the orphan and says so.
	broken := errors.New("store down")
	if n, err := st.RemoveOrphanBlobs(ctx(t), []blob.Ref{addr(other)}, func(blob.Ref) error { return broken }); n != 0 || !errors.Is(err, broken) {
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

// testRemovesOnlyOrphansOfBothLayouts: a store holding objects at keys and
// at addresses (an earlier release's) keeps those its rows name and
// removes the rest: a keyed object of a failed create, an address object
// no row names, and an address object whose row names a key.
func testRemovesOnlyOrphansOfBothLayouts(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	keyedHash, addressHash, strayHash, lostHash := hashOf("keyed"), hashOf("address"), hashOf("stray"), hashOf("lost")
	p, keyedKey := fs.keyed(keyedHash)
	if _, err := st.CreateAsset(ctx(t), newAsset(newID(), keyedHash), p); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateAsset(ctx(t), newAsset(newID(), addressHash), fs.publish(addressHash)); err != nil {
		t.Fatal(err)
	}
	p, strayKey := fs.keyed(strayHash)
	if _, err := st.CreateAsset(ctx(t), newAsset(newID(), strayHash), p); err != nil {
		t.Fatal(err)
	}
	fs.plant(addr(strayHash)) // an earlier release's copy beside the row's object
	p, lostKey := fs.keyed(lostHash)
	orphan(t, st, fs, lostHash, p)
	fs.plant(addr(lostHash))

	listed := []blob.Ref{{Key: keyedKey}, {Key: strayKey}, {Key: lostKey}, addr(addressHash), addr(strayHash), addr(lostHash)}
	n, err := st.RemoveOrphanBlobs(ctx(t), listed, fs.remove)
	if err != nil || n != 3 {
		t.Fatalf("RemoveOrphanBlobs = %d, %v; want 3", n, err)
	}
	for _, c := range []struct {
		obj  blob.Ref
		kept bool
	}{
		{blob.Ref{Key: keyedKey}, true}, {blob.Ref{Key: strayKey}, true}, {addr(addressHash), true},
		{addr(strayHash), false}, {blob.Ref{Key: lostKey}, false}, {addr(lostHash), false},
	} {
		if fs.hasObject(c.obj) != c.kept {
			t.Errorf("after the sweep, %s present = %v, want %v", c.obj, !c.kept, c.kept)
		}
	}
	kept := []blob.Ref{{Key: keyedKey}, {Key: strayKey}, addr(addressHash)}
	if n, err := st.RemoveOrphanBlobs(ctx(t), kept, fs.remove); err != nil || n != 0 {
		t.Fatalf("a sweep of what is left = %d, %v; want 0", n, err)
	}
}

// testOrphanSweepWaitsForCreate: a create of bytes that are still an
// orphan's (its publish found them present) is under way while the sweep
// reaches the hash: the sweep must wait for it and leave the bytes.
func testOrphanSweepWaitsForCreate(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("contended")
	orphan(t, st, fs, hash, fs.publish(hash))
	sweepDuringPublish(t, st, fs, hash, fs.publish(hash), addr(hash))
}

// testOrphanSweepWaitsForKeyedCreate: the sweep reaches a create's own
// object after the create made it visible and before it committed: the
// sweep must wait for the create's outcome and leave the object.
func testOrphanSweepWaitsForKeyedCreate(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("keyed, contended")
	p, key := fs.keyed(hash)
	sweepDuringPublish(t, st, fs, hash, p, blob.Ref{Key: key})
}

// sweepDuringPublish runs a create with p that stops inside its publish,
// once its object is visible, while a sweep of listed runs; the sweep must
// wait, and the object must stay.
func sweepDuringPublish(t *testing.T, st storage.Store, fs *fakeFS, hash string, p storage.Publisher, listed blob.Ref) {
	t.Helper()
	inPublish, release := make(chan struct{}), make(chan struct{})
	created := make(chan error, 1)
	a := newAsset(newID(), hash)
	go func() {
		_, err := st.CreateAsset(ctx(t), a, pausing{p, inPublish, release})
		created <- err
	}()
	<-inPublish
	swept := make(chan error, 1)
	go func() {
		_, err := st.RemoveOrphanBlobs(ctx(t), []blob.Ref{listed}, fs.remove)
		swept <- err
	}()
	// Give the sweep time to reach the object while the create holds it.
	time.Sleep(100 * time.Millisecond)
	close(release)
	if err := <-created; err != nil {
		t.Fatalf("the create: %v", err)
	}
	if err := <-swept; err != nil {
		t.Fatalf("the sweep: %v", err)
	}
	if !fs.hasObject(listed) || fs.removeCount(hash) != 0 {
		t.Fatalf("the sweep removed bytes a create recorded (present %v, removed %d times)", fs.hasObject(listed), fs.removeCount(hash))
	}
	got, err := st.GetAsset(ctx(t), a.AccountID, a.ID)
	if err != nil {
		t.Fatalf("the created asset: %v", err)
	}
	if got.Object() != (blob.Ref{Hash: hash, Key: listed.Key}) {
		t.Fatalf("the created asset's object = %+v, want %+v", got.Object(), listed)
	}
}

// pausing publishes through p, then signals and waits before returning,
// as a create whose commit is slow.
type pausing struct {
	storage.Publisher
	in, release chan struct{}
}

func (p pausing) Publish(held *blob.Ref) (blob.Ref, error) {
	obj, err := p.Publisher.Publish(held)
	close(p.in)
	<-p.release
	return obj, err
}
