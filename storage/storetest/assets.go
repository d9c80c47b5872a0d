package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// assetCases cover creating and reading assets: round trips, dedup answers,
// publish semantics, the idempotency-key backstop and account isolation.
var assetCases = []storeCase{
	{"CreateGetRoundTrip", testCreateGetRoundTrip},
	{"DedupAccountHadBlob", testDedupAccountHadBlob},
	{"PublishErrorLeavesNoRow", testPublishErrorLeavesNoRow},
	{"IdempotencyKeyBackstop", testIdempotencyKeyBackstop},
	{"DuplicateAssetID", testDuplicateAssetID},
	{"GetAssetIsolation", testGetAssetIsolation},
	{"FindAsset", testFindAsset},
	{"FindAssetByPath", testFindAssetByPath},
	{"AccountBlob", testAccountBlob},
}

func testCreateGetRoundTrip(t *testing.T, st storage.Store) {
	account := newID()
	full := newAsset(account, hashOf("full"))
	minimal := storage.NewAsset{
		ID: newID(), AccountID: account, Hash: hashOf("minimal"),
		SizeBytes: 0, ContentType: "application/octet-stream", FilePath: "upload.bin",
	}
	withKey := newAsset(account, hashOf("key"))
	withKey.IdempotencyKey = "idem-" + newID()
	unicode := newAsset(account, hashOf("unicode"))
	unicode.FilePath = "sub dir/ünïcode 'quoted\".png"
	unicode.Tags = []string{"a,b", `"q"`, "", "ü"}

	tests := []struct {
		name string
		in   storage.NewAsset
	}{
		{"all fields", full},
		{"no tags, job or expiry", minimal},
		{"idempotency key", withKey},
		{"awkward strings", unicode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeFS()
			before := time.Now().Add(-time.Minute)
			c := mustCreate(t, st, fs, tc.in)
			after := time.Now().Add(time.Minute)

			if c.AccountHadBlob {
				t.Error("AccountHadBlob = true for the first asset over a hash")
			}
			if n := fs.publishCount(tc.in.Hash); n != 1 {
				t.Errorf("publish called %d times, want 1", n)
			}
			if !fs.has(tc.in.Hash) {
				t.Error("blob not present after create")
			}
			got := c.Asset
			if got.CreatedAt.Before(before) || got.CreatedAt.After(after) {
				t.Errorf("CreatedAt = %v, want about now", got.CreatedAt)
			}
			checkUTC(t, "CreatedAt", got.CreatedAt)
			if got.ExpiresAt != nil {
				checkUTC(t, "ExpiresAt", *got.ExpiresAt)
			}
			if d := diffAsset(got, expectFromNew(tc.in, got.CreatedAt)); d != "" {
				t.Errorf("Created.Asset: %s", d)
			}
			stored, err := st.GetAsset(ctx(t), account, tc.in.ID)
			if err != nil {
				t.Fatalf("GetAsset: %v", err)
			}
			checkUTC(t, "stored CreatedAt", stored.CreatedAt)
			if d := diffAsset(stored, got); d != "" {
				t.Errorf("GetAsset differs from Created.Asset: %s", d)
			}
		})
	}
}

func testDedupAccountHadBlob(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	accountA, accountB := newID(), newID()
	shared, other := hashOf("shared"), hashOf("other")
	steps := []struct {
		name    string
		account string
		hash    string
		wantHad bool
	}{
		{"A first over shared", accountA, shared, false},
		{"A second over shared", accountA, shared, true},
		{"B first over bytes only A holds", accountB, shared, false},
		{"B second over shared", accountB, shared, true},
		{"A first over other", accountA, other, false},
		{"A third over shared", accountA, shared, true},
	}
	for _, s := range steps {
		c := mustCreate(t, st, fs, newAsset(s.account, s.hash))
		if c.AccountHadBlob != s.wantHad {
			t.Errorf("%s: AccountHadBlob = %v, want %v", s.name, c.AccountHadBlob, s.wantHad)
		}
	}
	if n := fs.publishCount(shared); n != 5 {
		t.Errorf("publish(shared) called %d times, want 5 (once per create)", n)
	}
	if n := fs.publishCount(other); n != 1 {
		t.Errorf("publish(other) called %d times, want 1", n)
	}
}

func testPublishErrorLeavesNoRow(t *testing.T, st storage.Store) {
	tests := []struct {
		name      string
		preExists bool // another asset already references the hash
	}{
		{"new blob", false},
		{"blob already referenced", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeFS()
			account := newID()
			hash := hashOf("publish-fails")
			var existing storage.Created
			if tc.preExists {
				existing = mustCreate(t, st, fs, newAsset(newID(), hash))
			}
			boom := errors.New("disk full")
			fs.publishErr = boom
			a := newAsset(account, hash)
			a.IdempotencyKey = "idem-" + newID()
			_, err := st.CreateAsset(ctx(t), a, fs.publish(a.Hash))
			if !errors.Is(err, boom) {
				t.Fatalf("CreateAsset err = %v, want it to wrap the publish error", err)
			}
			fs.publishErr = nil

			_, err = st.GetAsset(ctx(t), account, a.ID)
			wantNotFound(t, "GetAsset after failed publish", err)
			_, err = st.FindAsset(ctx(t), account, hash, a.FilePath)
			wantNotFound(t, "FindAsset after failed publish", err)
			if _, ok, err := st.AccountBlob(ctx(t), account, hash); err != nil || ok {
				t.Errorf("AccountBlob after failed publish = %v, %v; want false, nil", ok, err)
			}
			// The failed create must not have kept its idempotency key.
			retry := newAsset(account, hash)
			retry.IdempotencyKey = a.IdempotencyKey
			c := mustCreate(t, st, fs, retry)
			if c.AccountHadBlob {
				t.Error("AccountHadBlob = true after the only earlier create failed")
			}
			// The failed create must not have leaked a blob reference: once
			// every real asset is gone, remove runs exactly once.
			if tc.preExists {
				if err := st.DeleteAsset(ctx(t), existing.Asset.AccountID, existing.Asset.ID, failRemove(t)); err != nil {
					t.Fatalf("DeleteAsset(existing): %v", err)
				}
			}
			if err := st.DeleteAsset(ctx(t), account, retry.ID, fs.remove); err != nil {
				t.Fatalf("DeleteAsset(retry): %v", err)
			}
			if n := fs.removeCount(hash); n != 1 {
				t.Errorf("remove called %d times after the last asset went, want 1", n)
			}
		})
	}
}

func testIdempotencyKeyBackstop(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	accountA, accountB := newID(), newID()
	key := "idem-" + newID()
	first := newAsset(accountA, hashOf("first"))
	first.IdempotencyKey = key
	mustCreate(t, st, fs, first)

	tests := []struct {
		name    string
		account string
		hash    string
		key     string
		wantDup bool
	}{
		{"same account, same key, new bytes", accountA, hashOf("dup-new"), key, true},
		{"same account, same key, same bytes", accountA, first.Hash, key, true},
		{"other account, same key", accountB, hashOf("b"), key, false},
		{"same account, other key", accountA, hashOf("a2"), "idem-" + newID(), false},
		{"same account, no key", accountA, hashOf("nokey1"), "", false},
		{"same account, no key again", accountA, hashOf("nokey2"), "", false},
	}
	live := []storage.Asset{{ID: first.ID, AccountID: accountA, Hash: first.Hash}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := newAsset(tc.account, tc.hash)
			a.IdempotencyKey = tc.key
			publishedBefore := fs.publishCount(tc.hash)
			c, err := st.CreateAsset(ctx(t), a, fs.publish(a.Hash))
			if !tc.wantDup {
				if err != nil {
					t.Fatalf("CreateAsset: %v", err)
				}
				live = append(live, c.Asset)
				return
			}
			if !errors.Is(err, storage.ErrDuplicate) {
				t.Fatalf("CreateAsset err = %v, want storage.ErrDuplicate", err)
			}
			_, err = st.GetAsset(ctx(t), tc.account, a.ID)
			wantNotFound(t, "GetAsset of the refused asset", err)
			if tc.hash != first.Hash {
				if n := fs.publishCount(tc.hash) - publishedBefore; n != 0 {
					t.Errorf("publish called %d times for a refused create, want 0", n)
				}
			}
		})
	}
	// Every blob on disk is referenced, and deleting every live asset removes
	// each blob exactly once: the refused creates leaked no references.
	assertFSMatches(t, st, fs, live)
	for _, a := range live {
		if err := st.DeleteAsset(ctx(t), a.AccountID, a.ID, fs.remove); err != nil {
			t.Fatalf("DeleteAsset(%s): %v", a.ID, err)
		}
		if n := fs.removeCount(a.Hash); n != 1 {
			t.Errorf("remove(%s) called %d times, want 1", a.Hash, n)
		}
	}
	if left := fs.presentHashes(); len(left) != 0 {
		t.Errorf("blobs left after deleting every asset: %v", left)
	}
}

func testDuplicateAssetID(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a := newAsset(newID(), hashOf("a"))
	mustCreate(t, st, fs, a)
	again := newAsset(newID(), hashOf("again"))
	again.ID = a.ID
	if _, err := st.CreateAsset(ctx(t), again, fs.publish(again.Hash)); !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("second CreateAsset with one ID: err = %v, want storage.ErrDuplicate", err)
	}
	got, err := st.GetAsset(ctx(t), a.AccountID, a.ID)
	if err != nil || got.Hash != a.Hash {
		t.Errorf("original asset after refused duplicate = %+v, %v", got, err)
	}
}

func testGetAssetIsolation(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	owner, stranger := newID(), newID()
	a := newAsset(owner, hashOf("private"))
	mustCreate(t, st, fs, a)
	tests := []struct {
		name, account, id string
	}{
		{"other account's id", stranger, a.ID},
		{"unknown id", owner, newID()},
		{"empty account", "", a.ID},
	}
	for _, tc := range tests {
		_, err := st.GetAsset(ctx(t), tc.account, tc.id)
		wantNotFound(t, tc.name, err)
	}
}

func testFindAsset(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, stranger := newID(), newID()
	hash := hashOf("find")
	older := newAsset(account, hash)
	older.FilePath = "shared/name.png"
	mustCreate(t, st, fs, older)
	waitClockTick()
	newer := newAsset(account, hash)
	newer.FilePath = older.FilePath
	want := mustCreate(t, st, fs, newer).Asset
	elsewhere := newAsset(account, hash)
	elsewhere.FilePath = "other/name.png"
	mustCreate(t, st, fs, elsewhere)

	got, err := st.FindAsset(ctx(t), account, hash, older.FilePath)
	if err != nil {
		t.Fatalf("FindAsset: %v", err)
	}
	if d := diffAsset(got, want); d != "" {
		t.Errorf("FindAsset did not return the newest match: %s", d)
	}
	misses := []struct {
		name, account, hash, path string
	}{
		{"other account", stranger, hash, older.FilePath},
		{"other hash", account, hashOf("nope"), older.FilePath},
		{"other path", account, hash, "missing.png"},
	}
	for _, m := range misses {
		_, err := st.FindAsset(ctx(t), m.account, m.hash, m.path)
		wantNotFound(t, "FindAsset "+m.name, err)
	}
}

func testFindAssetByPath(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, stranger := newID(), newID()
	path := "inputs/photo.jpg"
	past := micro(time.Now().Add(-time.Hour))

	older := newAsset(account, hashOf("v1"))
	older.FilePath = path
	mustCreate(t, st, fs, older)
	waitClockTick()
	live := newAsset(account, hashOf("v2"))
	live.FilePath = path
	live.ExpiresAt = nil // never expires
	want := mustCreate(t, st, fs, live).Asset
	waitClockTick()
	expired := newAsset(account, hashOf("v3"))
	expired.FilePath = path
	expired.ExpiresAt = &past
	mustCreate(t, st, fs, expired)

	onlyExpired := newAsset(account, hashOf("gone"))
	onlyExpired.FilePath = "inputs/gone.jpg"
	onlyExpired.ExpiresAt = &past
	mustCreate(t, st, fs, onlyExpired)

	got, err := st.FindAssetByPath(ctx(t), account, path)
	if err != nil {
		t.Fatalf("FindAssetByPath: %v", err)
	}
	if d := diffAsset(got, want); d != "" {
		t.Errorf("FindAssetByPath did not return the newest unexpired asset: %s", d)
	}
	_, err = st.FindAssetByPath(ctx(t), stranger, path)
	wantNotFound(t, "FindAssetByPath other account", err)
	_, err = st.FindAssetByPath(ctx(t), account, onlyExpired.FilePath)
	wantNotFound(t, "FindAssetByPath only expired", err)
	_, err = st.FindAssetByPath(ctx(t), account, "inputs/none.jpg")
	wantNotFound(t, "FindAssetByPath unknown path", err)
}

func testAccountBlob(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	owner, stranger := newID(), newID()
	a := newAsset(owner, hashOf("blob"))
	a.SizeBytes = 777
	mustCreate(t, st, fs, a)
	tests := []struct {
		name, account, hash string
		wantOK              bool
	}{
		{"owner", owner, a.Hash, true},
		{"bytes held only by another account", stranger, a.Hash, false},
		{"unknown hash", owner, hashOf("unknown"), false},
	}
	for _, tc := range tests {
		size, ok, err := st.AccountBlob(ctx(t), tc.account, tc.hash)
		if err != nil {
			t.Fatalf("%s: AccountBlob: %v", tc.name, err)
		}
		if ok != tc.wantOK || (ok && size != 777) {
			t.Errorf("%s: AccountBlob = %d, %v; want ok=%v size 777", tc.name, size, ok, tc.wantOK)
		}
	}
	if err := st.DeleteAsset(ctx(t), owner, a.ID, fs.remove); err != nil {
		t.Fatalf("DeleteAsset: %v", err)
	}
	if _, ok, err := st.AccountBlob(ctx(t), owner, a.Hash); err != nil || ok {
		t.Errorf("AccountBlob after delete = %v, %v; want false, nil", ok, err)
	}
}

// waitClockTick sleeps long enough that the next create's CreatedAt is
// strictly later at microsecond precision, so "newest" is well defined. It is
// an ordering aid, not a timing assertion.
func waitClockTick() { time.Sleep(5 * time.Millisecond) }

// assertFSMatches checks that the fake file system holds exactly the hashes
// of the given live assets and that each of those assets still exists.
func assertFSMatches(t *testing.T, st storage.Store, fs *fakeFS, live []storage.Asset) {
	t.Helper()
	want := map[string]bool{}
	for _, a := range live {
		if _, err := st.GetAsset(ctx(t), a.AccountID, a.ID); err != nil {
			t.Errorf("live asset %s: GetAsset: %v", a.ID, err)
		}
		if !fs.has(a.Hash) {
			t.Errorf("live asset %s references blob %s that is not present", a.ID, a.Hash)
		}
		want[a.Hash] = true
	}
	for _, h := range fs.presentHashes() {
		if !want[h] {
			t.Errorf("blob %s is present but no live asset references it", h)
		}
	}
}
