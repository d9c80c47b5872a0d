package comfygate

import (
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
)

// TestOpenFailureIsNotRemembered: backends that could not be opened at
// first use are opened by a later call once the cause is gone (after
// retryOpenAfter: a call right after a failure gets its error at once).
func TestOpenFailureIsNotRemembered(t *testing.T) {
	dir := t.TempDir()
	blocker := filepath.Join(dir, "blocked")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r := newResources(resourceConfig{
		Storage: StorageConfig{Backend: "embedded", Dir: filepath.Join(dir, "data")},
		Blobs:   BlobsConfig{Backend: "file_system", Dir: filepath.Join(blocker, "blobs")},
	}, zap.NewNop())
	defer r.Destruct()
	if err := r.open(); err == nil {
		t.Fatal("open succeeded with a file where the blob directory must go")
	}
	if r.store != nil || r.blobs != nil || r.claims != nil {
		t.Fatal("a failed open left backends behind")
	}
	if err := os.Remove(blocker); err != nil {
		t.Fatal(err)
	}
	// Within retryOpenAfter the failure answers for itself, untried.
	if err := r.open(); err == nil {
		t.Fatal("an open right after a failure tried again")
	}
	r.lastTry = r.lastTry.Add(-retryOpenAfter)
	if err := r.open(); err != nil {
		t.Fatalf("open after the cause was removed: %v", err)
	}
	if r.store == nil || r.blobs == nil || r.claims == nil || r.bus == nil {
		t.Fatal("open succeeded but left a backend unset")
	}
	if err := r.open(); err != nil {
		t.Fatalf("a second open: %v", err)
	}
}
