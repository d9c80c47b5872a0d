package integration

import (
	"bytes"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestUploadPartsInAnyOrder: the contract sets no order on an upload's
// parts, and clients send the file before its metadata as often as after.
// Through the gateway, on every backend (and on S3 with a file of several
// parts): a file-first upload creates the asset its metadata describes, a
// dedup hit in that order is a 200, and a file-first upload refused once
// its metadata arrives (missing or invalid part, expected_hash mismatch)
// leaves no record, no object, no temp object or multipart upload, and its
// Idempotency-Key free.
func TestUploadPartsInAnyOrder(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			checkPartsInAnyOrder(t, startGateway(t, b), 300_000)
		})
	}
	t.Run("s3 multi-part", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		bucket := s3test.Bucket(t)
		s3Buckets.Store(dir, bucket)
		t.Cleanup(func() { s3Buckets.Delete(dir) })
		global := fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 16MiB",
			pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile("part_size 5MiB"))
		g := gateway.Start(t, siteConfig(global, "comfy_auth none"), gateway.Options{Dir: dir})
		checkPartsInAnyOrder(t, g, 2*5<<20+1)
	})
}

func checkPartsInAnyOrder(t *testing.T, g *gateway.Gateway, size int) {
	data := randomBytes(size)
	hash := hashOf(data)
	fileOf := func(d []byte) part { return part{name: "file", filename: "upload.bin", data: d} }
	ct := part{name: "content_type", value: "image/webp"}
	key := map[string]string{"Idempotency-Key": uuid.NewString()}

	// File first, every other part after it.
	first := upload(t, g, key, fileOf(data), part{name: "tags", value: "late"}, part{name: "file_path", value: "late/first.webp"},
		ct, part{name: "expected_hash", value: hash})
	if first.Status != http.StatusCreated {
		t.Fatalf("file-first upload: %d %s", first.Status, first.Body)
	}
	a := first.JSON(t)
	if a["hash"] != hash || a["size_bytes"] != float64(size) || a["content_type"] != "image/webp" ||
		a["file_path"] != "late/first.webp" || a["created_new"] != true || fmt.Sprint(a["tags"]) != "[late]" {
		t.Fatalf("file-first asset: %s", first.Body)
	}
	firstID := a["id"].(string)
	content := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+firstID+"/content", nil, nil)
	if content.Status != http.StatusOK || !bytes.Equal(content.Body, data) || content.Header.Get("Content-Type") != "image/webp" {
		t.Fatalf("file-first content: %d, %d bytes, %q", content.Status, len(content.Body), content.Header.Get("Content-Type"))
	}
	if r := upload(t, g, key, uploadParts(randomBytes(10), "reuse.png")...); r.Status != 422 || r.errorCode(t) != "idempotency_key_reuse" {
		t.Fatalf("the file-first upload's key again: %d %s", r.Status, r.Body)
	}

	// The same bytes with the file between the metadata parts: a dedup hit.
	second := upload(t, g, nil, ct, fileOf(data), part{name: "file_path", value: "middle.webp"})
	if second.Status != http.StatusOK || second.JSON(t)["created_new"] != false || second.JSON(t)["hash"] != hash ||
		second.JSON(t)["file_path"] != "middle.webp" {
		t.Fatalf("file-middle dedup upload: %d %s", second.Status, second.Body)
	}
	secondID := second.JSON(t)["id"].(string)
	objects := blobFiles(t, g, "objects")
	if len(objects) != 1 {
		t.Fatalf("objects after two uploads of the same bytes: %v", objects)
	}

	// Refusals found after the file: other bytes, and the stored ones.
	refused := randomBytes(size)
	for _, c := range []struct {
		name   string
		parts  []part
		status int
		code   string
	}{
		{"missing content_type", []part{fileOf(refused), {name: "file_path", value: "a.webp"}}, 422, "invalid_request"},
		{"missing file_path", []part{fileOf(refused), ct}, 422, "invalid_request"},
		{"bad content_type", []part{fileOf(refused), {name: "file_path", value: "a.webp"}, {name: "content_type", value: "image/"}}, 422, "invalid_request"},
		{"absolute file_path", []part{fileOf(refused), ct, {name: "file_path", value: "/etc/a.webp"}}, 422, "invalid_request"},
		{"expires_in too small", []part{fileOf(refused), ct, {name: "file_path", value: "a.webp"}, {name: "expires_in", value: "1"}}, 422, "invalid_request"},
		{"expected_hash mismatch after the file", []part{fileOf(refused), ct, {name: "file_path", value: "a.webp"}, {name: "expected_hash", value: hash}}, 409, "hash_mismatch"},
		{"expected_hash mismatch before the file", []part{{name: "expected_hash", value: hash}, fileOf(refused), ct, {name: "file_path", value: "a.webp"}}, 409, "hash_mismatch"},
		{"stored bytes, bad file_path", []part{fileOf(data), ct, {name: "file_path", value: "../a.webp"}}, 422, "invalid_request"},
		{"stored bytes, missing content_type", []part{{name: "expected_hash", value: hash}, fileOf(data), {name: "file_path", value: "a.webp"}}, 422, "invalid_request"},
	} {
		t.Run(c.name, func(t *testing.T) {
			key := map[string]string{"Idempotency-Key": uuid.NewString()}
			r := upload(t, g, key, c.parts...)
			if r.Status != c.status || r.errorCode(t) != c.code {
				t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, c.status, c.code)
			}
			if tmp := blobFiles(t, g, "tmp"); len(tmp) != 0 {
				t.Errorf("temp objects left: %v", tmp)
			}
			if now := blobFiles(t, g, "objects"); !slices.Equal(now, objects) {
				t.Errorf("objects %v, want %v", now, objects)
			}
			if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hashOf(refused), nil, nil); r.Status != http.StatusNotFound {
				t.Errorf("a record over the refused bytes: HEAD by-hash %d", r.Status)
			}
			retry := upload(t, g, key, uploadParts(randomBytes(100), "retry.png")...)
			if retry.Status != http.StatusCreated {
				t.Fatalf("retry with the refused upload's key: %d %s", retry.Status, retry.Body)
			}
			deleteAsset(t, g, retry.JSON(t)["id"].(string))
		})
	}

	// No refusal left a record over the stored bytes: once the two known
	// assets go, so do the bytes.
	deleteAsset(t, g, firstID)
	deleteAsset(t, g, secondID)
	if objects := blobFiles(t, g, "objects"); len(objects) != 0 {
		t.Fatalf("objects left after the last known record went: %v", objects)
	}
	assertNothingLeft(t, g, data)
}
