package integration

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestOrphanBlobsAreSwept: bytes at a content address that no record names
// (a create published them, then its transaction failed) are removed by the
// gateway's maintenance, on every backend, and the bytes of a recorded
// asset stay readable.
func TestOrphanBlobsAreSwept(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := siteConfig(b.global(t, dir), "comfy_auth none")
			g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
			kept := randomBytes(3000)
			r := upload(t, g, nil, uploadParts(kept, "kept.png")...)
			if r.Status != http.StatusCreated {
				t.Fatalf("upload: %d %s", r.Status, r.Body)
			}
			id := r.JSON(t)["id"].(string)
			g.Stop()

			orphanHash := hashOf(randomBytes(64))
			hx := strings.TrimPrefix(orphanHash, "blake3:")
			key := "objects/" + hx[0:2] + "/" + hx[2:4] + "/" + hx
			plantObject(t, dir, key, []byte("published by a create whose commit failed"))
			if !slices.Contains(blobFiles(t, g, "objects"), "/"+key[len("objects/"):]) &&
				!slices.Contains(blobFiles(t, g, "objects"), key) {
				t.Fatalf("the planted object is not listed: %v", blobFiles(t, g, "objects"))
			}

			g = gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: g.Port})
			deadline := time.Now().Add(30 * time.Second)
			for {
				files := blobFiles(t, g, "objects")
				if len(files) == 1 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the orphan was not swept: objects %v", files)
				}
				time.Sleep(100 * time.Millisecond)
			}
			got := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, nil)
			if got.Status != http.StatusOK || !bytes.Equal(got.Body, kept) {
				t.Fatalf("the recorded asset after the sweep: %d, %d bytes", got.Status, len(got.Body))
			}
		})
	}
}

// plantObject puts bytes at key of the gateway's blob store (its bucket, or
// data/blobs under dir), as a publish does.
func plantObject(t *testing.T, dir, key string, data []byte) {
	t.Helper()
	if bucket, ok := s3Buckets.Load(dir); ok {
		c := bucket.(s3test.Config)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := c.Client(t).PutObject(ctx, c.Bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{}); err != nil {
			t.Fatal(err)
		}
		return
	}
	p := filepath.Join(dir, "data", "blobs", filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}
