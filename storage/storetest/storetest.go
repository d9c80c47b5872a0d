// Package storetest is the one conformance suite every storage backend runs.
// A backend's own test file calls RunStore (and RunClaims for its claim store)
// with a factory; the suite then exercises every method of storage.Store and
// storage.ClaimStore through the interfaces only — there is no SQL here, so the
// same assertions hold the embedded SQLite store and the Postgres store to the
// same contract.
//
// Factory contract: open must return a fresh, empty, migrated store each time
// it is called (the suite calls it once per subtest) and must register the
// store's Close with t.Cleanup. The suite never calls Close itself.
//
// Conventions the suite enforces beyond storage.go's doc comments, so that
// backends stay interchangeable:
//   - asset, API key and account identifiers are UUID strings;
//   - timestamps come back in UTC and round-trip at microsecond precision;
//   - Created.Asset is exactly what a later GetAsset returns;
//   - a duplicate asset or API key ID is refused with storage.ErrDuplicate;
//   - a create refused for its idempotency key does not call publish, so no
//     bytes are made present that no record references;
//   - nil and empty Tags are equivalent.
package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// RunStore runs the storage.Store conformance suite. open is called once per
// subtest; see the package doc for what it must do.
func RunStore(t *testing.T, open func(t *testing.T) storage.Store) {
	t.Helper()
	groups := []struct {
		name  string
		cases []storeCase
	}{
		{"Assets", assetCases},
		{"Delete", deleteCases},
		{"Unreferenced", unreferencedCases},
		{"Concurrency", concurrencyCases},
		{"Orphans", orphanCases},
		{"Objects", objectCases},
		{"APIKeys", apiKeyCases},
		{"Migrate", migrateCases},
		{"Deployments", deploymentCases},
		{"DeploymentJobs", deploymentJobCases},
		{"Native", nativeCases},
		{"Credits", creditCases},
		{"CreditJobs", creditJobCases},
		{"FairShare", fairShareCases},
	}
	groups = append(groups, jobGroups...)
	for _, g := range groups {
		runGroup(t, g.name, g.cases, open)
	}
}

// runGroup runs cases as subtests of name, each on a fresh store.
func runGroup(t *testing.T, name string, cases []storeCase, open func(t *testing.T) storage.Store) {
	t.Helper()
	t.Run(name, func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				st := open(t)
				if st == nil {
					t.Fatal("open returned a nil store")
				}
				c.run(t, st)
			})
		}
	})
}

// storeCase is one subtest of RunStore: it receives a fresh store.
type storeCase struct {
	name string
	run  func(t *testing.T, st storage.Store)
}

// ctx returns a context bounded well beyond any sane test so that a deadlocked
// backend fails the test instead of hanging the package.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// newID returns a fresh UUID string.
func newID() string { return uuid.NewString() }

// hashOf returns a distinct, well-formed "blake3:<hex>" hash for a label. The
// store never hashes bytes itself, so any 64-hex value stands in.
func hashOf(label string) string {
	sum := sha256.Sum256([]byte(label + "/" + uuid.NewString()))
	return "blake3:" + hex.EncodeToString(sum[:])
}

// fakeFS stands in for the blob store: a publisher makes an object
// present, remove deletes it. Objects are named as blob.Ref names them (a
// key, or the hash's address); publish places them at the address, as the
// file_system store and uploads with a declared hash do, and keyed at a
// fresh key, as the s3 store does with every other upload. It counts calls
// so tests can assert exactly when the store touches bytes, and it can be
// told to fail.
type fakeFS struct {
	mu         sync.Mutex
	objects    map[string]blob.Ref // by name: Key, or Hash for an address
	published  map[string]int      // by hash
	removed    map[string]int      // by hash (by name for an unknown object)
	publishErr error
	// publishHold and removeHold, when set, widen race windows: each call
	// sleeps this long (while a correct store holds the blob's record) before
	// touching the set. Removal is made the slower so that a remove running
	// after its transaction lands after a racing create's publish.
	publishHold, removeHold time.Duration
}

func newFakeFS() *fakeFS {
	return &fakeFS{objects: map[string]blob.Ref{}, published: map[string]int{}, removed: map[string]int{}}
}

func objectName(r blob.Ref) string {
	if r.Key != "" {
		return r.Key
	}
	return r.Hash
}

// publish is the publisher of a create of hash's bytes at their address.
func (f *fakeFS) publish(hash string) storage.Publisher {
	return storage.PublishFunc(func(held *blob.Ref) (blob.Ref, error) {
		return f.put(blob.Ref{Hash: hash}, held)
	})
}

// keyed is the publisher of a create whose bytes were streamed into an
// object at a fresh key; it returns the key too.
func (f *fakeFS) keyed(hash string) (storage.Publisher, string) {
	// Unique across fakes, as an object store's fresh keys are: subtests
	// share one store, whose records outlive each subtest's fake.
	key := "blobs/" + strings.ReplaceAll(uuid.NewString(), "-", "")
	return keyedPublisher{f: f, own: blob.Ref{Hash: hash, Key: key}}, key
}

type keyedPublisher struct {
	f   *fakeFS
	own blob.Ref
}

func (p keyedPublisher) Key() string { return p.own.Key }

func (p keyedPublisher) Publish(held *blob.Ref) (blob.Ref, error) { return p.f.put(p.own, held) }

// Retract removes the publisher's own object (storage.Retracter), as an
// S3 upload removes the object it completed at its fresh key.
func (p keyedPublisher) Retract() error {
	p.f.drop(p.own)
	return nil
}

// put is a Publish: held is kept when it is present, else own is made so.
func (f *fakeFS) put(own blob.Ref, held *blob.Ref) (blob.Ref, error) {
	time.Sleep(f.publishHold)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.published[own.Hash]++
	if f.publishErr != nil {
		return blob.Ref{}, f.publishErr
	}
	if held != nil {
		if _, ok := f.objects[objectName(*held)]; ok {
			return *held, nil
		}
	}
	f.objects[objectName(own)] = own
	return own, nil
}

// remove is the store's remove step.
func (f *fakeFS) remove(obj blob.Ref) error {
	time.Sleep(f.removeHold)
	f.mu.Lock()
	defer f.mu.Unlock()
	name := objectName(obj)
	counted := obj.Hash
	if o, ok := f.objects[name]; ok {
		counted = o.Hash
	} else if counted == "" {
		counted = name
	}
	f.removed[counted]++
	delete(f.objects, name)
	return nil
}

// plant makes an object present without a create (what an earlier release
// or a failed transaction left).
func (f *fakeFS) plant(obj blob.Ref) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.objects[objectName(obj)] = obj
}

// drop removes an object without the store (damage from outside).
func (f *fakeFS) drop(obj blob.Ref) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.objects, objectName(obj))
}

// has reports whether some object holds hash's bytes.
func (f *fakeFS) has(hash string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, o := range f.objects {
		if o.Hash == hash {
			return true
		}
	}
	return false
}

// hasObject reports whether obj is present.
func (f *fakeFS) hasObject(obj blob.Ref) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.objects[objectName(obj)]
	return ok
}

func (f *fakeFS) publishCount(hash string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.published[hash]
}

func (f *fakeFS) removeCount(hash string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removed[hash]
}

// presentHashes lists the hashes of every object present.
func (f *fakeFS) presentHashes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.objects))
	for _, o := range f.objects {
		out = append(out, o.Hash)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// failRemove is a BlobFunc for calls that must not remove anything.
func failRemove(t *testing.T) storage.BlobFunc {
	return func(obj blob.Ref) error {
		t.Errorf("remove(%s) called when no blob should become unreferenced", obj)
		return nil
	}
}

// micro returns a UTC time at microsecond precision, the precision every
// backend must round-trip.
func micro(tm time.Time) time.Time { return tm.UTC().Truncate(time.Microsecond) }

// newAsset returns a fully populated NewAsset for account over hash.
func newAsset(account, hash string) storage.NewAsset {
	exp := micro(time.Now().Add(48 * time.Hour))
	return storage.NewAsset{
		ID:          newID(),
		AccountID:   account,
		Hash:        hash,
		SizeBytes:   1234,
		ContentType: "image/png",
		FilePath:    "out/" + newID()[:8] + ".png",
		Tags:        []string{"output", "seed-42"},
		JobID:       newID(),
		ExpiresAt:   &exp,
	}
}

// mustCreate creates a and fails the test on error.
func mustCreate(t *testing.T, st storage.Store, fs *fakeFS, a storage.NewAsset) storage.Created {
	t.Helper()
	c, err := st.CreateAsset(ctx(t), a, fs.publish(a.Hash))
	if err != nil {
		t.Fatalf("CreateAsset(%s): %v", a.ID, err)
	}
	return c
}

// wantNotFound fails unless err is storage.ErrNotFound.
func wantNotFound(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("%s: err = %v, want storage.ErrNotFound", what, err)
	}
}

// wantErr fails unless errors.Is(err, want).
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// checkUTC fails when tm is not in UTC.
func checkUTC(t *testing.T, what string, tm time.Time) {
	t.Helper()
	if tm.Location() != time.UTC {
		t.Errorf("%s location = %v, want UTC", what, tm.Location())
	}
}

// diffAsset describes how got differs from want, or returns "".
func diffAsset(got, want storage.Asset) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.ID != want.ID {
		add("ID", got.ID, want.ID)
	}
	if got.AccountID != want.AccountID {
		add("AccountID", got.AccountID, want.AccountID)
	}
	if got.Hash != want.Hash {
		add("Hash", got.Hash, want.Hash)
	}
	if got.ObjectKey != want.ObjectKey {
		add("ObjectKey", got.ObjectKey, want.ObjectKey)
	}
	if got.SizeBytes != want.SizeBytes {
		add("SizeBytes", got.SizeBytes, want.SizeBytes)
	}
	if got.ContentType != want.ContentType {
		add("ContentType", got.ContentType, want.ContentType)
	}
	if got.FilePath != want.FilePath {
		add("FilePath", got.FilePath, want.FilePath)
	}
	if !slices.Equal(got.Tags, want.Tags) && (len(got.Tags) != 0 || len(want.Tags) != 0) {
		add("Tags", got.Tags, want.Tags)
	}
	if got.JobID != want.JobID {
		add("JobID", got.JobID, want.JobID)
	}
	if got.DeploymentID != want.DeploymentID {
		add("DeploymentID", got.DeploymentID, want.DeploymentID)
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		add("CreatedAt", got.CreatedAt, want.CreatedAt)
	}
	switch {
	case (got.ExpiresAt == nil) != (want.ExpiresAt == nil):
		add("ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	case got.ExpiresAt != nil && !got.ExpiresAt.Equal(*want.ExpiresAt):
		add("ExpiresAt", *got.ExpiresAt, *want.ExpiresAt)
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

// expectFromNew is the Asset a NewAsset should become, minus CreatedAt.
func expectFromNew(a storage.NewAsset, createdAt time.Time) storage.Asset {
	return storage.Asset{
		ID: a.ID, AccountID: a.AccountID, Hash: a.Hash, SizeBytes: a.SizeBytes,
		ContentType: a.ContentType, FilePath: a.FilePath, Tags: a.Tags, JobID: a.JobID,
		DeploymentID: a.DeploymentID, CreatedAt: createdAt, ExpiresAt: a.ExpiresAt,
	}
}
