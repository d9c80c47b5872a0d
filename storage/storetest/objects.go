package storetest

import (
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// objectCases: a blob's row keeps the object its first upload streamed
// into; later creates of the same bytes are told of it and keep it; every
// read names it; the delete of the last record removes it; and rows of
// the address layout (an earlier release's) work beside keyed ones.
var objectCases = []storeCase{
	{"KeyedObjectKeptAcrossDedup", testKeyedObjectKeptAcrossDedup},
	{"KeyedObjectReplacedWhenGone", testKeyedObjectReplacedWhenGone},
	{"AddressRowsBesideKeyed", testAddressRowsBesideKeyed},
}

// heldBy records what held each Publish call was given.
type heldBy struct {
	storage.Publisher
	held **blob.Ref
}

func (h heldBy) Publish(held *blob.Ref) (blob.Ref, error) {
	*h.held = held
	return h.Publisher.Publish(held)
}

func testKeyedObjectKeptAcrossDedup(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("keyed dedup")
	p, first := fs.keyed(hash)
	var held *blob.Ref
	a := newAsset(newID(), hash)
	c, err := st.CreateAsset(ctx(t), a, heldBy{p, &held})
	if err != nil {
		t.Fatal(err)
	}
	if held != nil {
		t.Errorf("the first create was told of a held object %+v", *held)
	}
	if c.Asset.ObjectKey != first {
		t.Fatalf("Created.Asset.ObjectKey = %q, want the upload's own %q", c.Asset.ObjectKey, first)
	}
	if got, err := st.GetAsset(ctx(t), a.AccountID, a.ID); err != nil || got.Object() != (blob.Ref{Hash: hash, Key: first}) {
		t.Fatalf("GetAsset = %+v, %v; want the object at %q", got, err, first)
	}

	// A second upload of the same bytes, by another account: told of the
	// first's object, it keeps it, and its own never becomes present.
	p, second := fs.keyed(hash)
	b := newAsset(newID(), hash)
	c, err = st.CreateAsset(ctx(t), b, heldBy{p, &held})
	if err != nil {
		t.Fatal(err)
	}
	if held == nil || *held != (blob.Ref{Hash: hash, Key: first}) {
		t.Fatalf("the second create was told of %v, want the first's object", held)
	}
	if c.Asset.ObjectKey != first || fs.hasObject(blob.Ref{Key: second}) {
		t.Fatalf("the second create recorded %q (its own %q present %v), want the first's %q",
			c.Asset.ObjectKey, second, fs.hasObject(blob.Ref{Key: second}), first)
	}
	for _, read := range []func() (storage.Asset, error){
		func() (storage.Asset, error) { return st.GetAsset(ctx(t), b.AccountID, b.ID) },
		func() (storage.Asset, error) { return st.FindAsset(ctx(t), b.AccountID, hash, b.FilePath) },
		func() (storage.Asset, error) { return st.FindAssetByPath(ctx(t), b.AccountID, b.FilePath) },
	} {
		if got, err := read(); err != nil || got.ObjectKey != first {
			t.Fatalf("a read of the second asset = %+v, %v; want the object at %q", got, err, first)
		}
	}
	// The last delete removes the recorded object, once.
	if err := st.DeleteAsset(ctx(t), a.AccountID, a.ID, failRemove(t)); err != nil {
		t.Fatal(err)
	}
	var removed []blob.Ref
	if err := st.DeleteAsset(ctx(t), b.AccountID, b.ID, func(obj blob.Ref) error {
		removed = append(removed, obj)
		return fs.remove(obj)
	}); err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != (blob.Ref{Hash: hash, Key: first}) {
		t.Fatalf("the last delete removed %v, want the object at %q once", removed, first)
	}
	if left := fs.presentHashes(); len(left) != 0 {
		t.Fatalf("objects left after the last delete: %v", left)
	}
}

// testKeyedObjectReplacedWhenGone: the recorded object went missing (damage
// from outside); the next upload's own object takes its place in the row,
// for every asset over the blob.
func testKeyedObjectReplacedWhenGone(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("keyed heal")
	p, first := fs.keyed(hash)
	a := newAsset(newID(), hash)
	if _, err := st.CreateAsset(ctx(t), a, p); err != nil {
		t.Fatal(err)
	}
	fs.drop(blob.Ref{Key: first})
	p, second := fs.keyed(hash)
	b := newAsset(a.AccountID, hash)
	c, err := st.CreateAsset(ctx(t), b, p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Asset.ObjectKey != second || !c.AccountHadBlob {
		t.Fatalf("the healing create = %+v, want its own object %q (and a dedup hit)", c, second)
	}
	if got, err := st.GetAsset(ctx(t), a.AccountID, a.ID); err != nil || got.ObjectKey != second {
		t.Fatalf("the first asset after the heal = %+v, %v; want the object at %q", got, err, second)
	}
	for _, id := range []string{a.ID, b.ID} {
		if err := st.DeleteAsset(ctx(t), a.AccountID, id, fs.remove); err != nil {
			t.Fatal(err)
		}
	}
	if fs.hasObject(blob.Ref{Key: second}) || fs.removeCount(hash) != 1 {
		t.Fatalf("after the deletes: %q present %v, removes %d", second, fs.hasObject(blob.Ref{Key: second}), fs.removeCount(hash))
	}
}

// testAddressRowsBesideKeyed: bytes first stored at their address (the
// layout every row had before keys, and that uploads with a declared hash
// keep) stay there when a keyed upload of them follows, and the delete
// removes the address object.
func testAddressRowsBesideKeyed(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	hash := hashOf("address first")
	a := mustCreate(t, st, fs, newAsset(newID(), hash)).Asset
	if a.ObjectKey != "" {
		t.Fatalf("an address create recorded key %q", a.ObjectKey)
	}
	p, own := fs.keyed(hash)
	c, err := st.CreateAsset(ctx(t), newAsset(newID(), hash), p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Asset.ObjectKey != "" || fs.hasObject(blob.Ref{Key: own}) {
		t.Fatalf("the keyed create over an address object recorded %q (own present %v)", c.Asset.ObjectKey, fs.hasObject(blob.Ref{Key: own}))
	}
	var removed []blob.Ref
	for _, x := range []storage.Asset{a, c.Asset} {
		if err := st.DeleteAsset(ctx(t), x.AccountID, x.ID, func(obj blob.Ref) error {
			removed = append(removed, obj)
			return fs.remove(obj)
		}); err != nil {
			t.Fatal(err)
		}
	}
	if len(removed) != 1 || removed[0] != addr(hash) {
		t.Fatalf("removed %v, want the address object once", removed)
	}
}
