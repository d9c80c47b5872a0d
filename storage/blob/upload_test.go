package blob

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

func TestUploadRoundTrip(t *testing.T) {
	big := randomBytes(3*BufferSize+12345, 1)
	readFrom := func(u *fileUpload, d []byte) error { _, err := u.ReadFrom(bytes.NewReader(d)); return err }
	tests := []struct {
		name  string
		data  []byte
		write func(u *fileUpload, data []byte) error
	}{
		// The conformance suite covers ReadFrom and odd Writes; these are the
		// file store's own paths: a write of whole buffers that skips the
		// copy, and a write that leaves a partial buffer for ReadFrom.
		{name: "one large Write", data: big, write: func(u *fileUpload, d []byte) error { _, err := u.Write(d); return err }},
		{name: "Write then ReadFrom", data: big, write: func(u *fileUpload, d []byte) error {
			if _, err := u.Write(d[:10]); err != nil {
				return err
			}
			return readFrom(u, d[10:])
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			u, err := openUpload(s)
			if err != nil {
				t.Fatal(err)
			}
			defer u.Abort()
			if err := tt.write(u, tt.data); err != nil {
				t.Fatalf("write: %v", err)
			}
			if got := u.Size(); got != int64(len(tt.data)) {
				t.Fatalf("Size = %d, want %d", got, len(tt.data))
			}
			if files := listFiles(t, filepath.Join(s.Dir(), "objects")); len(files) != 0 {
				t.Fatalf("object visible before Publish: %v", files)
			}
			hash, size, err := u.Finish()
			if err != nil {
				t.Fatalf("Finish: %v", err)
			}
			if want := hashOf(tt.data); hash != want || size != int64(len(tt.data)) {
				t.Fatalf("Finish = %s, %d; want %s, %d", hash, size, want, len(tt.data))
			}
			if ok, _ := exists(s, hash); ok {
				t.Fatal("object exists before Publish")
			}
			if _, err := u.Publish(nil); err != nil {
				t.Fatalf("Publish: %v", err)
			}
			assertTempEmpty(t, s)
			hexd := hash[len(HashPrefix):]
			if _, err := os.Stat(filepath.Join(s.Dir(), "objects", hexd[:2], hexd[2:4], hexd)); err != nil {
				t.Fatalf("object not at sharded path: %v", err)
			}
			f, n, err := s.Open(bg, Ref{Hash: hash}, 0)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer f.Close()
			got, _ := io.ReadAll(f)
			if n != int64(len(tt.data)) || !bytes.Equal(got, tt.data) {
				t.Fatalf("Open returned %d bytes (size %d), want %d", len(got), n, len(tt.data))
			}
		})
	}
}

func TestConcurrentPublishSameBytes(t *testing.T) {
	s := newStore(t)
	data := randomBytes(2*BufferSize+3, 3)
	const publishers = 8
	uploads := make([]*fileUpload, publishers)
	for i := range uploads {
		u, err := openUpload(s)
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
	var wg sync.WaitGroup
	errs := make([]error, publishers)
	start := make(chan struct{})
	for i, u := range uploads {
		wg.Go(func() {
			<-start
			_, errs[i] = u.Publish(nil)
		})
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Publish #%d: %v", i, err)
		}
	}
	assertTempEmpty(t, s)
	objects := listFiles(t, filepath.Join(s.Dir(), "objects"))
	if len(objects) != 1 {
		t.Fatalf("objects = %v, want exactly one", objects)
	}
	f, _, err := s.Open(bg, Ref{Hash: hashOf(data)}, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got, _ := io.ReadAll(f)
	if !bytes.Equal(got, data) {
		t.Fatal("published object does not hold the uploaded bytes")
	}
}

func TestPublishHealsDamagedObject(t *testing.T) {
	s := newStore(t)
	data := []byte("the real bytes")
	hash := hashOf(data)
	hexd := hash[len(HashPrefix):]
	dir := filepath.Join(s.Dir(), "objects", hexd[:2], hexd[2:4])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, hexd), []byte("trunc"), 0o600); err != nil {
		t.Fatal(err)
	}
	u, err := openUpload(s)
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
	if _, err := u.Publish(nil); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	got, err := os.ReadFile(filepath.Join(dir, hexd))
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("object = %q, %v; want the uploaded bytes", got, err)
	}
	assertTempEmpty(t, s)
}
