package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// apiKeyCases cover API key storage; migrateCases cover Migrate.
var (
	apiKeyCases = []storeCase{
		{"CreateAndDigest", testAPIKeyCreateAndDigest},
		{"Revoke", testAPIKeyRevoke},
		{"Unknown", testAPIKeyUnknown},
		{"DuplicateID", testAPIKeyDuplicateID},
		{"List", testAPIKeyList},
	}
	migrateCases = []storeCase{
		{"RepeatIsNoop", testMigrateRepeatIsNoop},
		{"Concurrent", testMigrateConcurrent},
	}
)

// newKey returns an API key for account and the digest of a secret.
func newKey(account, name string) (storage.APIKey, []byte) {
	digest := sha256.Sum256([]byte("secret-" + newID()))
	return storage.APIKey{
		ID: newID(), AccountID: account, Name: name,
		CreatedAt: micro(time.Now().Add(-time.Minute)),
	}, digest[:]
}

func mustCreateKey(t *testing.T, st storage.Store, k storage.APIKey, digest []byte) {
	t.Helper()
	if err := st.CreateAPIKey(ctx(t), k, digest); err != nil {
		t.Fatalf("CreateAPIKey(%s): %v", k.ID, err)
	}
}

// diffKey compares keys, ignoring RevokedAt's value but not its presence.
func diffKey(t *testing.T, what string, got, want storage.APIKey) {
	t.Helper()
	if got.ID != want.ID || got.AccountID != want.AccountID || got.Name != want.Name ||
		!got.CreatedAt.Equal(want.CreatedAt) || (got.RevokedAt == nil) != (want.RevokedAt == nil) {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
	checkUTC(t, what+" CreatedAt", got.CreatedAt)
	if got.RevokedAt != nil {
		checkUTC(t, what+" RevokedAt", *got.RevokedAt)
	}
}

func testAPIKeyCreateAndDigest(t *testing.T, st storage.Store) {
	k, digest := newKey(newID(), "ci key — ünïcode")
	mustCreateKey(t, st, k, digest)
	got, gotDigest, err := st.APIKeyDigest(ctx(t), k.ID)
	if err != nil {
		t.Fatalf("APIKeyDigest: %v", err)
	}
	diffKey(t, "APIKeyDigest key", got, k)
	if !bytes.Equal(gotDigest, digest) {
		t.Errorf("digest = %x, want %x", gotDigest, digest)
	}
}

func testAPIKeyRevoke(t *testing.T, st storage.Store) {
	account := newID()
	k, digest := newKey(account, "to revoke")
	other, otherDigest := newKey(account, "stays")
	mustCreateKey(t, st, k, digest)
	mustCreateKey(t, st, other, otherDigest)
	if err := st.RevokeAPIKey(ctx(t), k.ID); err != nil {
		t.Fatalf("RevokeAPIKey: %v", err)
	}
	_, _, err := st.APIKeyDigest(ctx(t), k.ID)
	wantNotFound(t, "APIKeyDigest of a revoked key", err)
	if _, _, err := st.APIKeyDigest(ctx(t), other.ID); err != nil {
		t.Errorf("APIKeyDigest of the other key: %v", err)
	}
	keys, err := st.ListAPIKeys(ctx(t), account)
	if err != nil {
		t.Fatalf("ListAPIKeys: %v", err)
	}
	i := slices.IndexFunc(keys, func(x storage.APIKey) bool { return x.ID == k.ID })
	if i < 0 {
		t.Fatalf("revoked key missing from ListAPIKeys: %+v", keys)
	}
	if r := keys[i].RevokedAt; r == nil || r.Before(k.CreatedAt) {
		t.Errorf("listed RevokedAt = %v, want set and after CreatedAt %v", r, k.CreatedAt)
	}
}

func testAPIKeyUnknown(t *testing.T, st storage.Store) {
	_, _, err := st.APIKeyDigest(ctx(t), newID())
	wantNotFound(t, "APIKeyDigest unknown", err)
	wantNotFound(t, "RevokeAPIKey unknown", st.RevokeAPIKey(ctx(t), newID()))
}

func testAPIKeyDuplicateID(t *testing.T, st storage.Store) {
	k, digest := newKey(newID(), "first")
	mustCreateKey(t, st, k, digest)
	again, againDigest := newKey(newID(), "second")
	again.ID = k.ID
	if err := st.CreateAPIKey(ctx(t), again, againDigest); !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("CreateAPIKey with a used ID: err = %v, want storage.ErrDuplicate", err)
	}
	got, gotDigest, err := st.APIKeyDigest(ctx(t), k.ID)
	if err != nil || got.Name != k.Name || !bytes.Equal(gotDigest, digest) {
		t.Errorf("original key after refused duplicate = %+v, %x, %v", got, gotDigest, err)
	}
}

func testAPIKeyList(t *testing.T, st storage.Store) {
	accountA, accountB := newID(), newID()
	want := map[string][]storage.APIKey{}
	for _, acct := range []string{accountA, accountA, accountB} {
		k, digest := newKey(acct, "key")
		mustCreateKey(t, st, k, digest)
		want[acct] = append(want[acct], k)
		want[""] = append(want[""], k)
	}
	tests := []struct {
		name, account string
		want          []storage.APIKey
	}{
		{"account A", accountA, want[accountA]},
		{"account B", accountB, want[accountB]},
		{"every account", "", want[""]},
		{"account without keys", newID(), nil},
	}
	byID := func(a, b storage.APIKey) int {
		if a.ID < b.ID {
			return -1
		}
		if a.ID > b.ID {
			return 1
		}
		return 0
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := st.ListAPIKeys(ctx(t), tc.account)
			if err != nil {
				t.Fatalf("ListAPIKeys: %v", err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("ListAPIKeys returned %d keys, want %d: %+v", len(got), len(tc.want), got)
			}
			exp := slices.Clone(tc.want)
			slices.SortFunc(got, byID)
			slices.SortFunc(exp, byID)
			for i := range got {
				diffKey(t, "listed key", got[i], exp[i])
			}
		})
	}
}

func testMigrateRepeatIsNoop(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a := mustCreate(t, st, fs, newAsset(newID(), hashOf("before"))).Asset
	k, digest := newKey(a.AccountID, "before")
	mustCreateKey(t, st, k, digest)
	for i := range 2 {
		if err := st.Migrate(ctx(t)); err != nil {
			t.Fatalf("Migrate #%d on a migrated store: %v", i+1, err)
		}
	}
	got, err := st.GetAsset(ctx(t), a.AccountID, a.ID)
	if err != nil {
		t.Fatalf("GetAsset after Migrate: %v", err)
	}
	if d := diffAsset(got, a); d != "" {
		t.Errorf("asset changed by Migrate: %s", d)
	}
	if _, _, err := st.APIKeyDigest(ctx(t), k.ID); err != nil {
		t.Errorf("APIKeyDigest after Migrate: %v", err)
	}
	c := mustCreate(t, st, fs, newAsset(a.AccountID, a.Hash))
	if !c.AccountHadBlob {
		t.Error("blob reference lost across Migrate")
	}
}

func testMigrateConcurrent(t *testing.T, st storage.Store) {
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := st.Migrate(ctx(t)); err != nil {
				t.Errorf("concurrent Migrate: %v", err)
			}
		}()
	}
	wg.Wait()
	mustCreate(t, st, newFakeFS(), newAsset(newID(), hashOf("after")))
}
