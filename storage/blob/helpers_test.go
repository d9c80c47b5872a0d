package blob

import (
	"context"
	"encoding/hex"
	"errors"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/zeebo/blake3"
)

// newStore returns an initialised store in a fresh temp dir.
func newStore(t testing.TB) *FileSystem {
	t.Helper()
	s := NewFileSystem(t.TempDir())
	if err := s.Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	return s
}

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
	return HashPrefix + hex.EncodeToString(sum[:])
}

// listFiles lists regular files below dir, relative to it.
func listFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return out
}

func assertTempEmpty(t testing.TB, s *FileSystem) {
	t.Helper()
	if files := listFiles(t, filepath.Join(s.Dir(), "tmp")); len(files) != 0 {
		t.Fatalf("temp dir not empty: %v", files)
	}
}

var bg = context.Background()

// openUpload starts an upload on the file system store as its own type, so
// that tests can look at its temp file.
func openUpload(s *FileSystem) (*fileUpload, error) {
	u, err := s.NewUpload(bg, "")
	if err != nil {
		return nil, err
	}
	return u.(*fileUpload), nil
}

// exists reports whether s holds hash.
func exists(s *FileSystem, hash string) (bool, error) {
	_, err := s.Stat(bg, Ref{Hash: hash})
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
