package storetest

import (
	"errors"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// unreferencedCases cover bytes whose last reference went: they are
// removed only after the transaction that dropped it committed, and what
// such a removal could not do is left to RemoveUnreferencedBlobs.
var unreferencedCases = []storeCase{
	{"FailedRemoveLeavesBytesToSweep", testFailedRemoveLeavesBytesToSweep},
	{"CreateTakesOverUnreferenced", testCreateTakesOverUnreferenced},
}

// testFailedRemoveLeavesBytesToSweep: a delete whose removal fails has
// still deleted the asset (its commit came first); the bytes stay until
// one RemoveUnreferencedBlobs pass, which removes them exactly once.
func testFailedRemoveLeavesBytesToSweep(t *testing.T, st storage.Store) {
	for _, layout := range []string{"address", "key"} {
		t.Run(layout, func(t *testing.T) {
			fs := newFakeFS()
			hash := hashOf("unreferenced")
			a := newAsset(newID(), hash)
			pub := fs.publish(hash)
			if layout == "key" {
				pub, _ = fs.keyed(hash)
			}
			if _, err := st.CreateAsset(ctx(t), a, pub); err != nil {
				t.Fatalf("CreateAsset: %v", err)
			}
			refused := errors.New("the blob store is down")
			if err := st.DeleteAsset(ctx(t), a.AccountID, a.ID, func(blob.Ref) error { return refused }); err != nil {
				t.Fatalf("DeleteAsset with a failing remove: %v, want success (the delete committed)", err)
			}
			_, err := st.GetAsset(ctx(t), a.AccountID, a.ID)
			wantNotFound(t, "GetAsset after the delete", err)
			if !fs.has(hash) {
				t.Fatal("bytes gone although their removal failed")
			}
			n, err := st.RemoveUnreferencedBlobs(ctx(t), 100, fs.remove)
			if err != nil {
				t.Fatalf("RemoveUnreferencedBlobs: %v", err)
			}
			if n != 1 || fs.has(hash) || fs.removeCount(hash) != 1 {
				t.Errorf("RemoveUnreferencedBlobs removed %d; bytes present %v, removed %d times; want 1, false, 1",
					n, fs.has(hash), fs.removeCount(hash))
			}
			if n, err := st.RemoveUnreferencedBlobs(ctx(t), 100, fs.remove); err != nil || n != 0 {
				t.Errorf("second RemoveUnreferencedBlobs = %d, %v; want 0, nil", n, err)
			}
		})
	}
}

// testCreateTakesOverUnreferenced: a create of bytes whose record lost its
// last reference, before their removal ran, keeps the recorded object
// (still present) and makes the record referenced again, so the removal
// that comes later leaves it; when the object is gone by then, the create's
// own bytes take its place.
func testCreateTakesOverUnreferenced(t *testing.T, st storage.Store) {
	for _, objectThere := range []bool{true, false} {
		name := "object still there"
		if !objectThere {
			name = "object gone"
		}
		t.Run(name, func(t *testing.T) {
			fs := newFakeFS()
			hash := hashOf("takeover")
			first := newAsset(newID(), hash)
			pub, key := fs.keyed(hash)
			if _, err := st.CreateAsset(ctx(t), first, pub); err != nil {
				t.Fatalf("CreateAsset: %v", err)
			}
			recorded := blob.Ref{Hash: hash, Key: key}
			if err := st.DeleteAsset(ctx(t), first.AccountID, first.ID, func(blob.Ref) error {
				return errors.New("refused")
			}); err != nil {
				t.Fatalf("DeleteAsset: %v", err)
			}
			if !objectThere {
				fs.drop(recorded)
			}
			second := newAsset(newID(), hash)
			pub2, key2 := fs.keyed(hash)
			created, err := st.CreateAsset(ctx(t), second, pub2)
			if err != nil {
				t.Fatalf("CreateAsset over the unreferenced record: %v", err)
			}
			want := key
			if !objectThere {
				want = key2
			}
			if created.Asset.ObjectKey != want {
				t.Errorf("ObjectKey = %q, want %q", created.Asset.ObjectKey, want)
			}
			if n, err := st.RemoveUnreferencedBlobs(ctx(t), 100, fs.remove); err != nil || n != 0 {
				t.Errorf("RemoveUnreferencedBlobs = %d, %v; want 0, nil (the record is referenced again)", n, err)
			}
			if !fs.hasObject(blob.Ref{Hash: hash, Key: want}) {
				t.Errorf("the object the record names (%s) is gone", want)
			}
			got, err := st.GetAsset(ctx(t), second.AccountID, second.ID)
			if err != nil || got.ObjectKey != want {
				t.Errorf("GetAsset = %q, %v; want ObjectKey %q", got.ObjectKey, err, want)
			}
		})
	}
}
