package blobtest

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/blob"
)

// testPublishExisting publishes the same bytes from several uploads, small
// and streamed, of both layouts, the way the storage layer does: the
// first as new bytes, the others told of the first's object, which they
// keep. One object holds the bytes, and the others left nothing behind.
func testPublishExisting(t *testing.T, h Harness) {
	s := h.Store
	for _, size := range []int{10, 2*h.Large + 1} {
		data := randomBytes(size, uint64(size))
		// Which uploads declare the hash: every pair of layouts, held
		// and new, comes up.
		for _, declared := range [][3]bool{{false, false, false}, {true, false, true}, {false, true, true}} {
			uploads := make([]blob.Upload, 3)
			for i := range uploads {
				expected := ""
				if declared[i] {
					expected = hashOf(data)
				}
				u, err := s.NewUpload(ctx(t), expected)
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
			var held *blob.Ref
			for i, u := range uploads {
				ref, err := u.Publish(held)
				if err != nil {
					t.Fatalf("Publish #%d: %v", i, err)
				}
				if held != nil && ref != *held {
					t.Fatalf("Publish #%d over %+v = %+v, want the held object kept", i, *held, ref)
				}
				held = &ref
				if err := u.Abort(); err != nil {
					t.Fatalf("Abort #%d: %v", i, err)
				}
			}
			if got := readAll(t, s, *held); !bytes.Equal(got, data) {
				t.Fatal("object does not hold the uploaded bytes")
			}
			assertNoLeftovers(t, s)
			assertObjects(t, s, *held)
			if err := s.Remove(ctx(t), *held); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// testPublishOverMissing: the object a blob's row records is gone (damage
// from outside the store's protocol); the next upload of the bytes takes
// its place instead of keeping a reference to nothing.
func testPublishOverMissing(t *testing.T, h Harness) {
	s := h.Store
	for _, size := range []int{10, 2*h.Large + 1} {
		data := randomBytes(size, uint64(size)+7)
		gone := put(t, s, data)
		if err := s.Remove(ctx(t), gone); err != nil {
			t.Fatal(err)
		}
		u, err := s.NewUpload(ctx(t), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := u.Write(data); err != nil {
			t.Fatal(err)
		}
		if _, _, err := u.Finish(); err != nil {
			t.Fatal(err)
		}
		ref, err := u.Publish(&gone)
		if err != nil {
			t.Fatalf("Publish over a missing object: %v", err)
		}
		if want := (blob.Ref{Hash: hashOf(data), Key: u.Key()}); ref != want {
			t.Fatalf("Publish over a missing object = %+v, want the upload's own %+v", ref, want)
		}
		if err := u.Abort(); err != nil {
			t.Fatal(err)
		}
		if got := readAll(t, s, ref); !bytes.Equal(got, data) {
			t.Fatal("the replacing object holds other bytes")
		}
		assertNoLeftovers(t, s)
		assertObjects(t, s, ref)
		if err := s.Remove(ctx(t), ref); err != nil {
			t.Fatal(err)
		}
	}
}

// testExpectedHash: an upload started with the client's declared hash
// publishes bytes that match it (also over bytes already stored, which it
// keeps), and refuses bytes that do not, leaving nothing behind.
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
			var held *blob.Ref
			if c.stored {
				ref := put(t, s, data)
				held = &ref
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
				assertObjects(t, s)
			}
			ref, perr := u.Publish(held)
			if err := u.Abort(); err != nil {
				t.Fatalf("%d bytes, %s: Abort: %v", size, c.name, err)
			}
			assertNoLeftovers(t, s)
			if c.expected != hash {
				if !errors.Is(perr, blob.ErrHashMismatch) {
					t.Fatalf("%d bytes, %s: Publish = %v, want ErrHashMismatch", size, c.name, perr)
				}
				assertObjects(t, s)
				continue
			}
			if perr != nil {
				t.Fatalf("%d bytes, %s: Publish: %v", size, c.name, perr)
			}
			if held != nil && ref != *held {
				t.Fatalf("%d bytes, %s: Publish = %+v, want the stored %+v kept", size, c.name, ref, *held)
			}
			if got := readAll(t, s, ref); !bytes.Equal(got, data) {
				t.Fatalf("%d bytes, %s: read back other bytes", size, c.name)
			}
			assertObjects(t, s, ref)
			if err := s.Remove(ctx(t), ref); err != nil {
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
		assertObjects(t, s)
	}
}

func testOutOfOrder(t *testing.T, h Harness) {
	s := h.Store
	for name, run := range map[string]func(u blob.Upload) error{
		"Publish before Finish": func(u blob.Upload) error { _, err := u.Publish(nil); return err },
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
			_, err := u.Publish(nil)
			return err
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
	_, _, ferr := u.Finish()
	perr := errors.New("not published")
	var ref blob.Ref
	if werr == nil && ferr == nil {
		// A local store has nothing to cancel; it must still be whole.
		ref, perr = u.Publish(nil)
	}
	if err := u.Abort(); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	assertNoLeftovers(t, s)
	if perr == nil {
		if got := readAll(t, s, ref); !bytes.Equal(got, data) {
			t.Fatal("an upload that succeeded despite the cancel holds other bytes")
		}
	} else {
		assertObjects(t, s)
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
		if _, err := crashed["streaming"].Publish(nil); err == nil {
			t.Fatal("an upload whose temporary state was swept published")
		}
	}
	for _, stage := range []string{"finished", "finished, expected hash"} {
		if _, err := crashed[stage].Publish(nil); err == nil {
			t.Fatalf("%s: an upload whose temporary state was swept published", stage)
		}
	}
	for _, u := range crashed {
		_ = u.Abort()
	}
	assertNoLeftovers(t, s)
	assertObjects(t, s)
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
	if got, err := s.List(ctx(t), blob.Ref{}, 10); err == nil {
		t.Errorf("List with the store down = %v, want a store error", got)
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
			_, perr = u.Publish(nil)
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
	assertObjects(t, s, hash)
	if got := readAll(t, s, hash); !bytes.Equal(got, stored) {
		t.Fatal("a stored object changed across the outage")
	}
}
