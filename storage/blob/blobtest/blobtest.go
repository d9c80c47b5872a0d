// Package blobtest is the conformance suite of the blob.Store contract:
// every blob store (file_system, s3) passes Run against a real instance —
// for s3, a real S3 server.
package blobtest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/blob"
)

// Harness is one store under test.
type Harness struct {
	Store blob.Store
	// Large is a size past which the store's uploads take their streaming
	// path (several parts, several buffers); tests upload a few times it.
	Large int
	// Down makes the store unreachable, and Up brings it back with its
	// contents. Both are required: a store that cannot be taken down is
	// not tested for it.
	Down, Up func(t testing.TB)
}

type storeCase struct {
	name string
	fn   func(t *testing.T, h Harness)
}

var cases = []storeCase{
	{"RoundTrip", testRoundTrip},
	{"RangedRead", testRangedRead},
	{"RemoveAndMissing", testRemoveAndMissing},
	{"InvalidRef", testInvalidRef},
	{"PublishExisting", testPublishExisting},
	{"PublishOverMissing", testPublishOverMissing},
	{"ExpectedHash", testExpectedHash},
	{"AbortLeavesNothing", testAbortLeavesNothing},
	{"OutOfOrder", testOutOfOrder},
	{"ReadErrorFromSource", testReadErrorFromSource},
	{"CanceledUpload", testCanceledUpload},
	{"LeftoversAndSweep", testLeftoversAndSweep},
	{"StoreDown", testStoreDown},
	{"List", testList},
}

// Run runs the conformance suite; open returns a fresh, empty store per
// case.
func Run(t *testing.T, open func(t *testing.T) Harness) {
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := open(t)
			if h.Down == nil || h.Up == nil || h.Large <= 0 {
				t.Fatal("blobtest: the harness needs Large, Down and Up")
			}
			c.fn(t, h)
		})
	}
}

func ctx(t *testing.T) context.Context { return t.Context() }

// randomBytes returns n bytes that differ per seed.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func hashOf(b []byte) string {
	sum := blake3.Sum256(b)
	return blob.HashPrefix + hex.EncodeToString(sum[:])
}

// smallReader returns at most max bytes per Read, like a multipart part.
type smallReader struct {
	r   io.Reader
	max int
}

func (s *smallReader) Read(p []byte) (int, error) {
	if len(p) > s.max {
		p = p[:s.max]
	}
	return s.r.Read(p)
}

// put uploads data (declaring its hash when expected is set) through
// ReadFrom in multipart-sized reads, publishes it as new bytes and aborts
// (the cleanup every caller does), and returns the object.
func put(t *testing.T, s blob.Store, data []byte, expected ...string) blob.Ref {
	t.Helper()
	u, err := s.NewUpload(ctx(t), strings.Join(expected, ""))
	if err != nil {
		t.Fatalf("NewUpload: %v", err)
	}
	defer u.Abort()
	if _, err := u.ReadFrom(&smallReader{r: bytes.NewReader(data), max: 32 << 10}); err != nil {
		t.Fatalf("ReadFrom: %v", err)
	}
	hash, size, err := u.Finish()
	if err != nil {
		t.Fatalf("Finish: %v", err)
	}
	if want := hashOf(data); hash != want || size != int64(len(data)) {
		t.Fatalf("Finish = %s, %d; want %s, %d", hash, size, want, len(data))
	}
	ref, err := u.Publish(nil)
	if err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if ref.Hash != hash || ref.Key != u.Key() {
		t.Fatalf("Publish = %+v, want the upload's own object %s at key %q", ref, hash, u.Key())
	}
	if err := u.Abort(); err != nil {
		t.Fatalf("Abort after Publish: %v", err)
	}
	return ref
}

// readAll reads the whole object through Open.
func readAll(t *testing.T, s blob.Store, obj blob.Ref) []byte {
	t.Helper()
	r, size, err := s.Open(ctx(t), obj, 0)
	if err != nil {
		t.Fatalf("Open(%s): %v", obj, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", obj, err)
	}
	if int64(len(b)) != size {
		t.Fatalf("read %d bytes, Open said %d", len(b), size)
	}
	return b
}

// assertNoLeftovers checks that nothing of an upload remains.
func assertNoLeftovers(t *testing.T, s blob.Store) {
	t.Helper()
	left, err := s.Leftovers(ctx(t))
	if err != nil {
		t.Fatalf("Leftovers: %v", err)
	}
	if len(left) != 0 {
		t.Fatalf("leftovers remain: %v", left)
	}
}

func assertMissing(t *testing.T, s blob.Store, obj blob.Ref) {
	t.Helper()
	if _, err := s.Stat(ctx(t), obj); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(missing %s) = %v, want fs.ErrNotExist", obj, err)
	}
	if r, _, err := s.Open(ctx(t), obj, 0); !errors.Is(err, fs.ErrNotExist) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Open(missing %s) = %v, want fs.ErrNotExist", obj, err)
	}
}

// listAll lists every published object.
func listAll(t *testing.T, s blob.Store) []blob.Ref {
	t.Helper()
	refs, err := s.List(ctx(t), blob.Ref{}, 10000)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	return refs
}

// assertObjects checks that the store holds exactly the objects want: what
// an upload did not publish as the blob's, it left nowhere.
func assertObjects(t *testing.T, s blob.Store, want ...blob.Ref) {
	t.Helper()
	got := listAll(t, s)
	listed := func(r blob.Ref) blob.Ref {
		if r.Key != "" {
			r.Hash = "" // List names a keyed object by its key alone
		}
		return r
	}
	wantSet := map[blob.Ref]bool{}
	for _, r := range want {
		wantSet[listed(r)] = true
	}
	gotSet := map[blob.Ref]bool{}
	for _, r := range got {
		gotSet[r] = true
	}
	if len(got) != len(gotSet) || len(gotSet) != len(wantSet) {
		t.Fatalf("the store holds %v, want %v", got, want)
	}
	for r := range wantSet {
		if !gotSet[r] {
			t.Fatalf("the store holds %v, want %v", got, want)
		}
	}
}

func testRoundTrip(t *testing.T, h Harness) {
	s := h.Store
	sizes := []int{0, 1, 100 << 10, h.Large, 2*h.Large + 12345}
	writes := map[string]func(u blob.Upload, d []byte) error{
		"ReadFrom": func(u blob.Upload, d []byte) error {
			_, err := u.ReadFrom(&smallReader{r: bytes.NewReader(d), max: 4096})
			return err
		},
		"odd Writes": func(u blob.Upload, d []byte) error {
			for len(d) > 0 {
				n := min(len(d), 777_777)
				if _, err := u.Write(d[:n]); err != nil {
					return err
				}
				d = d[n:]
			}
			return nil
		},
	}
	for i, size := range sizes {
		for name, write := range writes {
			data := randomBytes(size, uint64(i)+uint64(len(name))<<8)
			u, err := s.NewUpload(ctx(t), "")
			if err != nil {
				t.Fatalf("NewUpload: %v", err)
			}
			if err := write(u, data); err != nil {
				t.Fatalf("%s %d bytes: %v", name, size, err)
			}
			if u.Size() != int64(size) {
				t.Fatalf("Size = %d, want %d", u.Size(), size)
			}
			hash, n, err := u.Finish()
			if err != nil || hash != hashOf(data) || n != int64(size) {
				t.Fatalf("%s %d bytes: Finish = %s, %d, %v", name, size, hash, n, err)
			}
			if again, _, _ := u.Finish(); again != hash {
				t.Fatalf("second Finish = %s", again)
			}
			own := blob.Ref{Hash: hash, Key: u.Key()}
			assertMissing(t, s, own) // not visible before Publish
			assertObjects(t, s)
			ref, err := u.Publish(nil)
			if err != nil || ref != own {
				t.Fatalf("Publish = %+v, %v; want %+v", ref, err, own)
			}
			if again, err := u.Publish(nil); err != nil || again != ref {
				t.Fatalf("second Publish = %+v, %v", again, err)
			}
			if err := u.Abort(); err != nil {
				t.Fatalf("Abort after Publish: %v", err)
			}
			if got, err := s.Stat(ctx(t), ref); err != nil || got != int64(size) {
				t.Fatalf("Stat = %d, %v; want %d", got, err, size)
			}
			if got := readAll(t, s, ref); !bytes.Equal(got, data) {
				t.Fatalf("%s %d bytes: read back %d different bytes", name, size, len(got))
			}
			assertNoLeftovers(t, s)
			assertObjects(t, s, ref)
			if err := s.Remove(ctx(t), ref); err != nil {
				t.Fatalf("Remove: %v", err)
			}
			assertObjects(t, s)
		}
	}
}

// testRangedRead reads the way http.ServeContent does: size by seeking to
// the end, back to the start, then to the range's first byte.
func testRangedRead(t *testing.T, h Harness) {
	s := h.Store
	data := randomBytes(2*h.Large+777, 7)
	for _, expected := range []string{"", hashOf(data)} { // both layouts
		rangedRead(t, s, h.Large, data, put(t, s, data, expected))
	}
}

func rangedRead(t *testing.T, s blob.Store, large int, data []byte, hash blob.Ref) {
	size := int64(len(data))
	for _, rg := range []struct{ from, n int64 }{
		{0, size}, {1, 10}, {int64(large) - 3, 10}, {size - 1, 1}, {size / 2, size - size/2}, {size, 0},
	} {
		r, got, err := s.Open(ctx(t), hash, rg.from)
		if err != nil {
			t.Fatalf("Open at %d: %v", rg.from, err)
		}
		if got != size {
			t.Fatalf("Open at %d: size %d, want %d", rg.from, got, size)
		}
		end, err := r.Seek(0, io.SeekEnd)
		if err != nil || end != size {
			t.Fatalf("Seek(0, End) = %d, %v", end, err)
		}
		if _, err := r.Seek(0, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		if _, err := r.Seek(rg.from, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(io.LimitReader(r, rg.n))
		if err != nil || !bytes.Equal(b, data[rg.from:rg.from+rg.n]) {
			t.Fatalf("range %d+%d: %d bytes, %v", rg.from, rg.n, len(b), err)
		}
		// Elsewhere after that (a second range of a multi-range request).
		if _, err := r.Seek(3, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		b = make([]byte, 5)
		if _, err := io.ReadFull(r, b); err != nil || !bytes.Equal(b, data[3:8]) {
			t.Fatalf("read after seek: %v", err)
		}
		if err := r.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	// A reader opened at the start reads to the end and then EOF.
	r, _, err := s.Open(ctx(t), hash, size-2)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(b, data[size-2:]) {
		t.Fatalf("tail: %q, %v", b, err)
	}
}

func testRemoveAndMissing(t *testing.T, h Harness) {
	s := h.Store
	data := []byte("content")
	hash := put(t, s, data)
	never := blob.Ref{Hash: hashOf([]byte("never stored"))}
	assertMissing(t, s, never)
	if err := s.Remove(ctx(t), never); err != nil {
		t.Fatalf("Remove(missing) = %v, want success", err)
	}
	if err := s.Remove(ctx(t), hash); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	assertMissing(t, s, hash)
	if err := s.Remove(ctx(t), hash); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	// The same bytes can come back after a remove.
	if again := put(t, s, data); !bytes.Equal(readAll(t, s, again), data) {
		t.Fatal("re-uploaded bytes differ")
	}
}

// testInvalidRef: a malformed hash, or a key the store could not have
// written (keys come from the database), is refused before any I/O.
func testInvalidRef(t *testing.T, h Harness) {
	s := h.Store
	hx := strings.Repeat("ab", 32)
	ok := hashOf([]byte("a valid hash"))
	for _, bad := range []blob.Ref{
		{}, {Hash: "blake3:" + strings.ToUpper(hx)}, {Hash: "blake3:../" + hx[3:]}, {Hash: "blake3:" + hx + "/.."},
		{Hash: "sha256:" + hx},
		{Hash: ok, Key: "../" + hx}, {Hash: ok, Key: "tmp/" + hx}, {Hash: ok, Key: "objects/ab/ab/" + hx},
		{Hash: ok, Key: "blobs/../" + hx[:29]}, {Key: "/etc/passwd"},
	} {
		want := blob.ErrInvalidHash
		if bad.Key != "" {
			want = blob.ErrInvalidKey
		}
		if _, err := s.Stat(ctx(t), bad); !errors.Is(err, want) {
			t.Errorf("Stat(%+v) = %v, want %v", bad, err, want)
		}
		if _, _, err := s.Open(ctx(t), bad, 0); !errors.Is(err, want) {
			t.Errorf("Open(%+v) = %v, want %v", bad, err, want)
		}
		if err := s.Remove(ctx(t), bad); !errors.Is(err, want) {
			t.Errorf("Remove(%+v) = %v, want %v", bad, err, want)
		}
	}
}
