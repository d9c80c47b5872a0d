package storetest

import (
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// deleteCases cover the reference-counting contract: remove runs exactly
// once, and only when the last record over a blob goes.
var deleteCases = []storeCase{
	{"RemoveOnLastReference", testRemoveOnLastReference},
	{"DeleteRefusals", testDeleteRefusals},
	{"RecreateAfterRemove", testRecreateAfterRemove},
	{"DeleteExpiredAssets", testDeleteExpiredAssets},
}

func testRemoveOnLastReference(t *testing.T, st storage.Store) {
	tests := []struct {
		name        string
		sameAccount bool
	}{
		{"two assets of one account", true},
		{"assets of two accounts", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeFS()
			hash := hashOf("refs")
			first := mustCreate(t, st, fs, newAsset(newID(), hash)).Asset
			secondAccount := newID()
			if tc.sameAccount {
				secondAccount = first.AccountID
			}
			second := mustCreate(t, st, fs, newAsset(secondAccount, hash)).Asset

			if err := st.DeleteAsset(ctx(t), first.AccountID, first.ID, fs.remove); err != nil {
				t.Fatalf("DeleteAsset(first): %v", err)
			}
			if n := fs.removeCount(hash); n != 0 {
				t.Errorf("remove called %d times while another asset references the blob", n)
			}
			if !fs.has(hash) {
				t.Error("blob gone while another asset references it")
			}
			if _, err := st.GetAsset(ctx(t), second.AccountID, second.ID); err != nil {
				t.Errorf("surviving asset: GetAsset: %v", err)
			}
			_, err := st.GetAsset(ctx(t), first.AccountID, first.ID)
			wantNotFound(t, "GetAsset of the deleted asset", err)

			if err := st.DeleteAsset(ctx(t), second.AccountID, second.ID, fs.remove); err != nil {
				t.Fatalf("DeleteAsset(second): %v", err)
			}
			if n := fs.removeCount(hash); n != 1 {
				t.Errorf("remove called %d times after the last reference went, want 1", n)
			}
			err = st.DeleteAsset(ctx(t), second.AccountID, second.ID, fs.remove)
			wantNotFound(t, "second DeleteAsset", err)
			if n := fs.removeCount(hash); n != 1 {
				t.Errorf("remove called %d times after a repeated delete, want 1", n)
			}
		})
	}
}

func testDeleteRefusals(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	owner := newID()
	a := mustCreate(t, st, fs, newAsset(owner, hashOf("mine"))).Asset
	tests := []struct {
		name, account, id string
	}{
		{"other account's asset", newID(), a.ID},
		{"unknown id", owner, newID()},
	}
	for _, tc := range tests {
		err := st.DeleteAsset(ctx(t), tc.account, tc.id, failRemove(t))
		wantNotFound(t, "DeleteAsset "+tc.name, err)
	}
	if _, err := st.GetAsset(ctx(t), owner, a.ID); err != nil {
		t.Errorf("asset after refused deletes: GetAsset: %v", err)
	}
	if !fs.has(a.Hash) {
		t.Error("blob removed by a refused delete")
	}
}

func testRecreateAfterRemove(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account := newID()
	hash := hashOf("again")
	a := mustCreate(t, st, fs, newAsset(account, hash)).Asset
	if err := st.DeleteAsset(ctx(t), account, a.ID, fs.remove); err != nil {
		t.Fatalf("DeleteAsset: %v", err)
	}
	c := mustCreate(t, st, fs, newAsset(account, hash))
	if c.AccountHadBlob {
		t.Error("AccountHadBlob = true after the account's only asset was deleted")
	}
	if !fs.has(hash) || fs.publishCount(hash) != 2 {
		t.Errorf("after re-create: present=%v publish calls=%d, want true, 2", fs.has(hash), fs.publishCount(hash))
	}
	if err := st.DeleteAsset(ctx(t), account, c.Asset.ID, fs.remove); err != nil {
		t.Fatalf("DeleteAsset(re-created): %v", err)
	}
	if n := fs.removeCount(hash); n != 2 {
		t.Errorf("remove called %d times over two lifetimes, want 2", n)
	}
}

func testDeleteExpiredAssets(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	now := micro(time.Now())
	past := now.Add(-time.Hour)
	future := now.Add(time.Hour)
	accountA, accountB := newID(), newID()
	sharedHash := hashOf("shared")

	mk := func(account, hash string, exp *time.Time) storage.Asset {
		a := newAsset(account, hash)
		a.ExpiresAt = exp
		return mustCreate(t, st, fs, a).Asset
	}
	expired := []storage.Asset{
		mk(accountA, hashOf("e1"), &past),
		mk(accountB, hashOf("e2"), &past),
		mk(accountA, sharedHash, &past),
	}
	kept := []storage.Asset{
		mk(accountA, sharedHash, &future),
		mk(accountB, hashOf("forever"), nil),
		mk(accountB, hashOf("later"), &future),
	}

	// Sweep in pages: the limit bounds each call and the total is exact.
	for i, want := range []int{2, 1, 0} {
		n, err := st.DeleteExpiredAssets(ctx(t), now, 2, fs.remove)
		if err != nil {
			t.Fatalf("DeleteExpiredAssets page %d: %v", i, err)
		}
		if n != want {
			t.Errorf("DeleteExpiredAssets page %d (limit 2, 3 expired) removed %d, want %d", i, n, want)
		}
	}
	for _, a := range expired {
		_, err := st.GetAsset(ctx(t), a.AccountID, a.ID)
		wantNotFound(t, "GetAsset of an expired, swept asset", err)
	}
	for _, h := range []string{expired[0].Hash, expired[1].Hash} {
		if n := fs.removeCount(h); n != 1 {
			t.Errorf("remove(%s) called %d times for an unreferenced blob, want 1", h, n)
		}
	}
	if n := fs.removeCount(sharedHash); n != 0 {
		t.Errorf("remove called %d times for a blob a live asset still references", n)
	}
	assertFSMatches(t, st, fs, kept)
}
