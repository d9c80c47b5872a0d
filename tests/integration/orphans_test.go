package integration

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestOrphanBlobsAreSwept: objects that no record names (a create
// published them, then its transaction failed) are removed by the
// gateway's maintenance, on every backend and, on S3, in both layouts (an
// object at its address, one at a key under blobs/), and the bytes of the
// recorded assets of either layout stay readable.
func TestOrphanBlobsAreSwept(t *testing.T) {
	t.Parallel()
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := siteConfig(b.global(t, dir), "comfy_auth none")
			g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
			kept := map[string][]byte{}
			for _, declared := range []bool{false, true} {
				data := randomBytes(3000)
				var extra []part
				if declared {
					extra = append(extra, part{name: "expected_hash", value: hashOf(data)})
				}
				r := upload(t, g, nil, uploadParts(data, "kept.png", extra...)...)
				if r.Status != http.StatusCreated {
					t.Fatalf("upload: %d %s", r.Status, r.Body)
				}
				kept[r.JSON(t)["id"].(string)] = data
			}
			recorded := len(blobFiles(t, g, "objects"))
			g.Stop()

			orphanHash := hashOf(randomBytes(64))
			hx := strings.TrimPrefix(orphanHash, "blake3:")
			orphans := []string{"objects/" + hx[0:2] + "/" + hx[2:4] + "/" + hx}
			if b.remoteBlobs {
				orphans = append(orphans, "blobs/"+hx[:32])
			}
			for _, key := range orphans {
				plantObject(t, dir, key, []byte("published by a create whose commit failed"))
			}
			if n := len(blobFiles(t, g, "objects")); n != recorded+len(orphans) {
				t.Fatalf("the planted objects are not listed: %v", blobFiles(t, g, "objects"))
			}

			g = gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: g.Port})
			deadline := time.Now().Add(30 * time.Second)
			for {
				files := blobFiles(t, g, "objects")
				if len(files) == recorded {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the orphans were not swept: objects %v", files)
				}
				time.Sleep(100 * time.Millisecond)
			}
			for id, data := range kept {
				got := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, nil)
				if got.Status != http.StatusOK || !bytes.Equal(got.Body, data) {
					t.Fatalf("a recorded asset after the sweep: %d, %d bytes", got.Status, len(got.Body))
				}
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
