package blob_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/blobtest"
)

// TestConformance runs the blob-store conformance suite on the file system
// store. Down puts a plain file where the store's directory was, so that
// every path under it fails (ENOTDIR) as a lost volume would.
func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blobtest.Harness {
		dir := filepath.Join(t.TempDir(), "blobs")
		s := blob.NewFileSystem(dir)
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		return blobtest.Harness{
			Store: s,
			Large: blob.BufferSize,
			Down: func(t testing.TB) {
				if err := os.Rename(dir, dir+".away"); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dir, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			Up: func(t testing.TB) {
				if err := os.Remove(dir); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(dir+".away", dir); err != nil {
					t.Fatal(err)
				}
			},
		}
	})
}
