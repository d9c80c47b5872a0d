package integration

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestNoServerSideCopy covers acceptance 3 of issue 32: a gateway whose
// bucket is reached through a proxy that counts S3 requests takes every
// upload path (the v2 upload, one part and several, with and without
// expected_hash; the same bytes again over either layout; from-hash; the
// ComfyUI front's /upload/image; a job's output; bytes whose object went
// missing), and the S3 server sees not one CopyObject or UploadPartCopy.
// Every asset reads back whole, and the bucket ends holding objects of
// both layouts.
func TestNoServerSideCopy(t *testing.T) {
	t.Parallel()
	bucket := s3test.Bucket(t)
	proxy := s3test.NewCountingProxy(t, bucket.Endpoint)
	cfg := gateway.V2Config(fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 32MiB",
		pgtest.DSN(t), pgtest.RedisURL(t), proxy.Bucket(bucket).Caddyfile("part_size 5MiB")), gateway.V2Site{})
	cfg = strings.Replace(cfg, "\t\tcomfy_jobs\n", "\t\tcomfy_jobs\n\t\tcomfy_native\n", 1)
	g := gateway.Start(t, cfg, gateway.Options{})

	small, large, declared := randomBytes(200_000), randomBytes(12<<20+7), randomBytes(11<<20+3)
	assets := map[string][]byte{} // id → bytes
	up := func(name string, data []byte, withHash bool) {
		t.Helper()
		var extra []part
		if withHash {
			extra = append(extra, part{name: "expected_hash", value: hashOf(data)})
		}
		r := upload(t, g, nil, uploadParts(data, name, extra...)...)
		if r.Status != http.StatusCreated && r.Status != http.StatusOK {
			t.Fatalf("upload %s: %d %s", name, r.Status, r.Body)
		}
		assets[r.JSON(t)["id"].(string)] = data
	}
	up("small.png", small, false)
	up("large.png", large, false)
	up("declared.png", declared, true)
	up("small-declared.png", randomBytes(1000), true)
	// The same bytes again, over an object at a key and one at an address,
	// with and without the hash.
	up("small-again.png", small, true)
	up("large-again.png", large, true)
	up("large-third.png", large, false)
	up("declared-again.png", declared, false)

	fh := do(t, http.MethodPost, g.URL+"/api/v2/assets/from-hash",
		strings.NewReader(`{"hash":"`+hashOf(large)+`","file_path":"from-hash.png"}`), nil)
	if fh.Status != http.StatusCreated {
		t.Fatalf("from-hash: %d %s", fh.Status, fh.Body)
	}
	assets[fh.JSON(t)["id"].(string)] = large

	// The ComfyUI front's upload.
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("image", "native.png")
	native := randomBytes(300_000)
	fw.Write(native)
	mw.Close()
	if r := do(t, http.MethodPost, g.URL+"/upload/image", &body, map[string]string{"Content-Type": mw.FormDataContentType()}); r.Status != http.StatusOK {
		t.Fatalf("/upload/image: %d %s", r.Status, r.Body)
	}

	// A job's output.
	in := gateway.GradientPNG(t, 32)
	up("input.png", in, false)
	r := submit(t, g, map[string]any{"workflow": invertWorkflow("input.png")}, map[string]string{"Idempotency-Key": uuid.NewString()})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	done := gateway.WaitJob(t, g.URL, r.JSON(t)["id"].(string), time.Minute, gateway.Terminal)
	if done["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", done["status"], done["error"])
	}

	// Bytes whose object went missing behind the gateway's back: the next
	// upload of them puts its own in its place.
	healed := randomBytes(6<<20 + 1)
	up("heal.png", healed, false)
	for _, k := range bucket.Keys(t, "blobs/") {
		if strings.Contains(k, "?") {
			continue
		}
		info, err := bucket.Client(t).StatObject(context.Background(), bucket.Bucket, k, minio.StatObjectOptions{})
		if err == nil && info.Size == int64(len(healed)) {
			if err := bucket.Client(t).RemoveObject(context.Background(), bucket.Bucket, k, minio.RemoveObjectOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	up("heal-again.png", healed, false)

	for id, data := range assets {
		got := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, nil)
		if got.Status != http.StatusOK || !bytes.Equal(got.Body, data) {
			t.Errorf("asset %s: %d, %d bytes; want its %d", id, got.Status, len(got.Body), len(data))
		}
	}
	counts := proxy.Counts()
	t.Logf("S3 requests by operation: %v", counts)
	if counts["CompleteMultipartUpload"] < 3 || counts["PutObject"] < 3 {
		t.Fatalf("the proxy did not see the uploads: %v", counts)
	}
	if n := proxy.Copies(); n != 0 {
		t.Errorf("%d server-side copies (CopyObject, UploadPartCopy); want none", n)
	}
	var keyed, addressed int
	for _, k := range bucket.Keys(t, "") {
		switch {
		case strings.Contains(k, "?uploadId="):
			t.Errorf("multipart upload left open: %s", k)
		case strings.HasPrefix(k, "blobs/"):
			keyed++
		case strings.HasPrefix(k, "objects/"):
			addressed++
		default:
			t.Errorf("object outside both layouts: %s", k)
		}
	}
	if keyed == 0 || addressed == 0 {
		t.Errorf("%d objects at keys, %d at addresses; want both layouts", keyed, addressed)
	}
}
