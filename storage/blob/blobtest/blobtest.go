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
	"time"

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
	{"InvalidHash", testInvalidHash},
	{"PublishExisting", testPublishExisting},
	{"ExpectedHash", testExpectedHash},
	{"AbortLeavesNothing", testAbortLeavesNothing},
	{"OutOfOrder", testOutOfOrder},
	{"ReadErrorFromSource", testReadErrorFromSource},
	{"CanceledUpload", testCanceledUpload},
	{"LeftoversAndSweep", testLeftoversAndSweep},
	{"StoreDown", testStoreDown},
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

// put uploads data through ReadFrom in multipart-sized reads, publishes it
// and aborts (the cleanup every caller does), and returns its hash.
func put(t *testing.T, s blob.Store, data []byte) string {
	t.Helper()
	u, err := s.NewUpload(ctx(t), "")
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
	if err := u.Publish(); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := u.Abort(); err != nil {
		t.Fatalf("Abort after Publish: %v", err)
	}
	return hash
}

// readAll reads the whole object through Open.
func readAll(t *testing.T, s blob.Store, hash string) []byte {
	t.Helper()
	r, size, err := s.Open(ctx(t), hash, 0)
	if err != nil {
		t.Fatalf("Open(%s): %v", hash, err)
	}
	defer r.Close()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read %s: %v", hash, err)
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

func assertMissing(t *testing.T, s blob.Store, hash string) {
	t.Helper()
	if _, err := s.Stat(ctx(t), hash); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Stat(missing) = %v, want fs.ErrNotExist", err)
	}
	if r, _, err := s.Open(ctx(t), hash, 0); !errors.Is(err, fs.ErrNotExist) {
		if r != nil {
			r.Close()
		}
		t.Fatalf("Open(missing) = %v, want fs.ErrNotExist", err)
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
			assertMissing(t, s, hash) // not visible before Publish
			if err := u.Publish(); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			if err := u.Abort(); err != nil {
				t.Fatalf("Abort after Publish: %v", err)
			}
			if got, err := s.Stat(ctx(t), hash); err != nil || got != int64(size) {
				t.Fatalf("Stat = %d, %v; want %d", got, err, size)
			}
			if got := readAll(t, s, hash); !bytes.Equal(got, data) {
				t.Fatalf("%s %d bytes: read back %d different bytes", name, size, len(got))
			}
			assertNoLeftovers(t, s)
			if err := s.Remove(ctx(t), hash); err != nil {
				t.Fatalf("Remove: %v", err)
			}
		}
	}
}

// testRangedRead reads the way http.ServeContent does: size by seeking to
// the end, back to the start, then to the range's first byte.
func testRangedRead(t *testing.T, h Harness) {
	s := h.Store
	data := randomBytes(2*h.Large+777, 7)
	hash := put(t, s, data)
	size := int64(len(data))
	for _, rg := range []struct{ from, n int64 }{
		{0, size}, {1, 10}, {int64(h.Large) - 3, 10}, {size - 1, 1}, {size / 2, size - size/2}, {size, 0},
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
	never := hashOf([]byte("never stored"))
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

func testInvalidHash(t *testing.T, h Harness) {
	s := h.Store
	hx := strings.Repeat("ab", 32)
	for _, bad := range []string{"", "blake3:" + strings.ToUpper(hx), "blake3:../" + hx[3:], "blake3:" + hx + "/..", "sha256:" + hx} {
		if _, err := s.Stat(ctx(t), bad); !errors.Is(err, blob.ErrInvalidHash) {
			t.Errorf("Stat(%q) = %v, want ErrInvalidHash", bad, err)
		}
		if _, _, err := s.Open(ctx(t), bad, 0); !errors.Is(err, blob.ErrInvalidHash) {
			t.Errorf("Open(%q) = %v, want ErrInvalidHash", bad, err)
		}
		if err := s.Remove(ctx(t), bad); !errors.Is(err, blob.ErrInvalidHash) {
			t.Errorf("Remove(%q) = %v, want ErrInvalidHash", bad, err)
		}
	}
}

// testPublishExisting publishes the same bytes from several uploads, small
// and streamed: every Publish succeeds, one object holds the bytes.
func testPublishExisting(t *testing.T, h Harness) {
	s := h.Store
	for _, size := range []int{10, 2*h.Large + 1} {
		data := randomBytes(size, uint64(size))
		uploads := make([]blob.Upload, 3)
		for i := range uploads {
			u, err := s.NewUpload(ctx(t), "")
			if err != nil {
				t.Fatal(err)
			}
			defer u.Abort()
			if _, err := u.Write(data); err != nil {
				t.Fatal(err)
			}
			if _, _, err := u.Finish(); err != nil {
				t.Fatal(err)
			}
			uploads[i] = u
		}
		for i, u := range uploads {
			if err := u.Publish(); err != nil {
				t.Fatalf("Publish #%d: %v", i, err)
			}
			if err := u.Abort(); err != nil {
				t.Fatalf("Abort #%d: %v", i, err)
			}
		}
		if got := readAll(t, s, hashOf(data)); !bytes.Equal(got, data) {
			t.Fatal("object does not hold the uploaded bytes")
		}
		assertNoLeftovers(t, s)
	}
}

// testExpectedHash: an upload started with the client's declared hash
// publishes bytes that match it (also over bytes already stored), and
// refuses bytes that do not, leaving nothing at either address.
func testExpectedHash(t *testing.T, h Harness) {
	s := h.Store
	for _, size := range []int{10, 2*h.Large + 1} {
		data := randomBytes(size, uint64(size)+100)
		other := hashOf(append([]byte("other"), data...))
		for _, c := range []struct {
			name     string
			expected string
			stored   bool // the bytes are in the store already
		}{{"matching", hashOf(data), false}, {"matching, already stored", hashOf(data), true}, {"not matching", other, false}} {
			if c.stored {
				put(t, s, data)
			}
			u, err := s.NewUpload(ctx(t), c.expected)
			if err != nil {
				t.Fatalf("%d bytes, %s: NewUpload: %v", size, c.name, err)
			}
			if _, err := u.ReadFrom(&smallReader{r: bytes.NewReader(data), max: 32 << 10}); err != nil {
				t.Fatalf("%d bytes, %s: ReadFrom: %v", size, c.name, err)
			}
			hash, n, err := u.Finish()
			if err != nil || hash != hashOf(data) || n != int64(size) {
				t.Fatalf("%d bytes, %s: Finish = %s, %d, %v", size, c.name, hash, n, err)
			}
			if !c.stored {
				assertMissing(t, s, hash)
			}
			perr := u.Publish()
			if err := u.Abort(); err != nil {
				t.Fatalf("%d bytes, %s: Abort: %v", size, c.name, err)
			}
			assertNoLeftovers(t, s)
			if c.expected != hash {
				if !errors.Is(perr, blob.ErrHashMismatch) {
					t.Fatalf("%d bytes, %s: Publish = %v, want ErrHashMismatch", size, c.name, perr)
				}
				assertMissing(t, s, hash)
				assertMissing(t, s, c.expected)
				continue
			}
			if perr != nil {
				t.Fatalf("%d bytes, %s: Publish: %v", size, c.name, perr)
			}
			if got := readAll(t, s, hash); !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, %s: read back other bytes", size, c.name)
			}
			if err := s.Remove(ctx(t), hash); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func testAbortLeavesNothing(t *testing.T, h Harness) {
	s := h.Store
	data := randomBytes(2*h.Large+5, 11)
	for _, stage := range []string{"nothing written", "writing small", "writing streamed", "finished small", "finished streamed"} {
		u, err := s.NewUpload(ctx(t), "")
		if err != nil {
			t.Fatal(err)
		}
		d := data
		if strings.HasSuffix(stage, "small") {
			d = data[:100]
		}
		if stage != "nothing written" {
			if _, err := u.Write(d); err != nil {
				t.Fatal(err)
			}
		}
		if strings.HasPrefix(stage, "finished") {
			if _, _, err := u.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		for i := 0; i < 2; i++ { // idempotent
			if err := u.Abort(); err != nil {
				t.Fatalf("%s: Abort #%d: %v", stage, i+1, err)
			}
		}
		assertNoLeftovers(t, s)
		assertMissing(t, s, hashOf(d))
	}
}

func testOutOfOrder(t *testing.T, h Harness) {
	s := h.Store
	for name, run := range map[string]func(u blob.Upload) error{
		"Publish before Finish": func(u blob.Upload) error { return u.Publish() },
		"Write after Finish": func(u blob.Upload) error {
			if _, _, err := u.Finish(); err != nil {
				return err
			}
			_, err := u.Write([]byte("x"))
			return err
		},
		"ReadFrom after Abort": func(u blob.Upload) error {
			_ = u.Abort()
			_, err := u.ReadFrom(strings.NewReader("x"))
			return err
		},
		"Finish after Abort": func(u blob.Upload) error {
			_ = u.Abort()
			_, _, err := u.Finish()
			return err
		},
		"Publish after Abort": func(u blob.Upload) error {
			_, _, _ = u.Finish()
			_ = u.Abort()
			return u.Publish()
		},
	} {
		u, err := s.NewUpload(ctx(t), "")
		if err != nil {
			t.Fatal(err)
		}
		if err := run(u); !errors.Is(err, blob.ErrUploadState) {
			t.Errorf("%s: %v, want ErrUploadState", name, err)
		}
		if err := u.Abort(); err != nil {
			t.Fatalf("%s: Abort: %v", name, err)
		}
		assertNoLeftovers(t, s)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

// testReadErrorFromSource: a body that fails (a client that goes away)
// surfaces as the reader's own error, after the store already took a few
// parts; Abort leaves nothing.
func testReadErrorFromSource(t *testing.T, h Harness) {
	s := h.Store
	cause := errors.New("client went away")
	u, err := s.NewUpload(ctx(t), "")
	if err != nil {
		t.Fatal(err)
	}
	head := randomBytes(2*h.Large+3, 13)
	n, err := u.ReadFrom(io.MultiReader(bytes.NewReader(head), errReader{cause}))
	if n != int64(len(head)) || !errors.Is(err, cause) {
		t.Fatalf("ReadFrom = %d, %v; want %d, %v", n, err, len(head), cause)
	}
	if err := u.Abort(); err != nil {
		t.Fatal(err)
	}
	assertNoLeftovers(t, s)
}

// testCanceledUpload: the upload's context ends mid-stream (the request was
// canceled). Writing or finishing fails, and Abort still cleans up.
func testCanceledUpload(t *testing.T, h Harness) {
	s := h.Store
	c, cancel := context.WithCancel(ctx(t))
	u, err := s.NewUpload(c, "")
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(3*h.Large, 17)
	if _, err := u.Write(data[:h.Large+1]); err != nil {
		t.Fatal(err)
	}
	cancel()
	_, werr := u.Write(data[h.Large+1:])
	hash, _, ferr := u.Finish()
	perr := errors.New("not published")
	if werr == nil && ferr == nil {
		// A local store has nothing to cancel; it must still be whole.
		perr = u.Publish()
	}
	if err := u.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	assertNoLeftovers(t, s)
	if perr == nil {
		if got := readAll(t, s, hash); !bytes.Equal(got, data) {
			t.Fatal("an upload that succeeded despite the cancel holds other bytes")
		}
	} else {
		assertMissing(t, s, hashOf(data))
	}
}

// testLeftoversAndSweep: an upload that was never ended (a crash) is listed
// and swept; a sweep with a long age leaves an upload in progress alone.
func testLeftoversAndSweep(t *testing.T, h Harness) {
	s := h.Store
	assertNoLeftovers(t, s)
	crashed := map[string]blob.Upload{}
	for _, stage := range []string{"streaming", "finished", "finished, expected hash"} {
		data := randomBytes(2*h.Large+1, uint64(len(stage)))
		expected := ""
		if strings.HasSuffix(stage, "expected hash") {
			expected = hashOf(data)
		}
		u, err := s.NewUpload(ctx(t), expected)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.Write(data); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(stage, "finished") {
			if _, _, err := u.Finish(); err != nil {
				t.Fatal(err)
			}
		}
		crashed[stage] = u // never ended: what a crash leaves
	}
	left, err := s.Leftovers(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(left) < len(crashed) {
		t.Fatalf("Leftovers = %v, want at least %d", left, len(crashed))
	}
	for _, l := range left {
		if l.Name == "" || l.Modified.IsZero() || time.Since(l.Modified) > time.Hour || time.Until(l.Modified) > time.Minute {
			t.Fatalf("implausible leftover %+v", l)
		}
	}
	if n, err := s.Sweep(ctx(t), time.Hour); err != nil || n != 0 {
		t.Fatalf("Sweep(1h) = %d, %v; want 0 (nothing is an hour old)", n, err)
	}
	time.Sleep(1100 * time.Millisecond) // past the stores' one-second timestamps
	n, err := s.Sweep(ctx(t), time.Second)
	if err != nil || n != len(left) {
		t.Fatalf("Sweep = %d, %v; want %d", n, err, len(left))
	}
	assertNoLeftovers(t, s)
	// The swept uploads fail cleanly instead of publishing missing bytes.
	if _, _, err := crashed["streaming"].Finish(); err == nil {
		if err := crashed["streaming"].Publish(); err == nil {
			t.Fatal("an upload whose temporary state was swept published")
		}
	}
	for _, stage := range []string{"finished", "finished, expected hash"} {
		if err := crashed[stage].Publish(); err == nil {
			t.Fatalf("%s: an upload whose temporary state was swept published", stage)
		}
	}
	for _, u := range crashed {
		_ = u.Abort()
	}
	assertNoLeftovers(t, s)
}

// testStoreDown: with the store down every operation fails with an error
// that is not "missing", an upload fails and its leftovers are swept once
// the store is back, and stored objects are intact.
func testStoreDown(t *testing.T, h Harness) {
	s := h.Store
	stored := randomBytes(2*h.Large+9, 19)
	hash := put(t, s, stored)
	// A read that is under way when the store goes down either completes
	// or fails; it never ends early as if the object were shorter.
	reading, _, err := s.Open(ctx(t), hash, 0)
	if err != nil {
		t.Fatal(err)
	}
	first := make([]byte, 100)
	if _, err := io.ReadFull(reading, first); err != nil {
		t.Fatal(err)
	}

	h.Down(t)
	rest, rerr := io.ReadAll(reading)
	reading.Close()
	if rerr == nil && !bytes.Equal(append(first, rest...), stored) {
		t.Fatalf("a read cut by the store going down ended cleanly with %d of %d bytes", len(first)+len(rest), len(stored))
	}
	if _, err := s.Stat(ctx(t), hash); err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat with the store down = %v, want a store error", err)
	}
	if r, _, err := s.Open(ctx(t), hash, 0); err == nil || errors.Is(err, fs.ErrNotExist) {
		if r != nil {
			r.Close()
		}
		t.Errorf("Open with the store down = %v, want a store error", err)
	}
	other := randomBytes(2*h.Large+1, 23)
	failed := false
	if u, err := s.NewUpload(ctx(t), ""); err != nil {
		failed = true
	} else {
		_, werr := u.Write(other)
		_, _, ferr := u.Finish()
		perr := errors.New("not published")
		if werr == nil && ferr == nil {
			perr = u.Publish()
		}
		failed = perr != nil
		_ = u.Abort() // may not reach the store; the sweep below must
	}
	if !failed {
		t.Error("an upload succeeded with the store down")
	}
	h.Up(t)

	if _, err := s.Sweep(ctx(t), 0); err != nil {
		t.Fatalf("Sweep after the store came back: %v", err)
	}
	assertNoLeftovers(t, s)
	assertMissing(t, s, hashOf(other))
	if got := readAll(t, s, hash); !bytes.Equal(got, stored) {
		t.Fatal("a stored object changed across the outage")
	}
}
