package blob

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestInitCreatesPrivateDirs(t *testing.T) {
	s := newStore(t)
	for _, d := range []string{"objects", "tmp"} {
		st, err := os.Stat(filepath.Join(s.Dir(), d))
		if err != nil {
			t.Fatalf("stat %s: %v", d, err)
		}
		if !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Fatalf("%s: mode %v, want dir 0700", d, st.Mode())
		}
	}
	if err := s.Init(); err != nil {
		t.Fatalf("second Init: %v", err)
	}
}

func TestNewUploadWithoutInit(t *testing.T) {
	s := NewFileSystem(filepath.Join(t.TempDir(), "missing"))
	if _, err := openUpload(s); err == nil {
		t.Fatal("NewUpload succeeded without Init")
	}
}

func TestOpenExistsRemove(t *testing.T) {
	s := newStore(t)
	data := []byte("content")
	hash := hashOf(data)
	missing := hashOf([]byte("other"))
	u, err := openUpload(s)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := u.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	if _, err := u.Publish(nil); err != nil {
		t.Fatal(err)
	}

	hexd := hash[len(HashPrefix):]
	invalid := []string{"", HashPrefix + strings.ToUpper(hexd), HashPrefix + "../" + hexd[3:], hash + "/..", "sha256:" + hexd}
	for _, h := range invalid {
		if _, _, err := s.Open(bg, Ref{Hash: h}, 0); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("Open(%q) = %v, want ErrInvalidHash", h, err)
		}
		if _, err := exists(s, h); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("Exists(%q) = %v, want ErrInvalidHash", h, err)
		}
		if err := s.Remove(bg, Ref{Hash: h}); !errors.Is(err, ErrInvalidHash) {
			t.Errorf("Remove(%q) = %v, want ErrInvalidHash", h, err)
		}
	}

	tests := []struct {
		name       string
		hash       string
		wantExists bool
	}{{"present", hash, true}, {"missing", missing, false}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, err := exists(s, tt.hash)
			if err != nil || ok != tt.wantExists {
				t.Fatalf("Exists = %v, %v; want %v", ok, err, tt.wantExists)
			}
			f, size, err := s.Open(bg, Ref{Hash: tt.hash}, 0)
			if !tt.wantExists {
				if !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("Open(missing) = %v, want fs.ErrNotExist", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			f.Close()
			if size != int64(len(data)) {
				t.Fatalf("size %d, want %d", size, len(data))
			}
		})
	}

	if err := s.Remove(bg, Ref{Hash: hash}); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := s.Remove(bg, Ref{Hash: hash}); err != nil {
		t.Fatalf("Remove of a missing object: %v", err)
	}
	if ok, _ := exists(s, hash); ok {
		t.Fatal("object still exists after Remove")
	}
}

func TestSweepTemp(t *testing.T) {
	s := newStore(t)
	tmp := filepath.Join(s.Dir(), "tmp")
	old := time.Now().Add(-2 * time.Hour)

	stale := make([]*fileUpload, 3)
	for i := range stale {
		u, err := openUpload(s)
		if err != nil {
			t.Fatal(err)
		}
		defer u.Abort()
		if err := os.Chtimes(u.tmpPath, old, old); err != nil {
			t.Fatal(err)
		}
		stale[i] = u
	}
	fresh, err := openUpload(s)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Abort()
	foreign := filepath.Join(tmp, "not-ours")
	if err := os.WriteFile(foreign, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(foreign, old, old); err != nil {
		t.Fatal(err)
	}

	n, err := s.Sweep(bg, time.Hour)
	if err != nil || n != len(stale) {
		t.Fatalf("SweepTemp = %d, %v; want %d", n, err, len(stale))
	}
	for _, u := range stale {
		if _, err := os.Stat(u.tmpPath); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("stale temp %s survived: %v", u.tmpPath, err)
		}
	}
	for _, p := range []string{fresh.tmpPath, foreign} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s was swept: %v", p, err)
		}
	}
	if n, err := s.Sweep(bg, time.Hour); err != nil || n != 0 {
		t.Fatalf("second SweepTemp = %d, %v; want 0", n, err)
	}
	// A swept upload fails cleanly rather than publishing a missing file:
	// Finish still syncs its open descriptor, but there is nothing to link.
	if _, _, err := stale[0].Finish(); err != nil {
		t.Fatalf("Finish after sweep: %v", err)
	}
	if _, err := stale[0].Publish(nil); err == nil {
		t.Fatal("Publish of a swept upload succeeded")
	}
	if err := os.Remove(foreign); err != nil {
		t.Fatal(err)
	}
}
