package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// genericMessage is the message of every upstream_error: nothing of the
// store's own error reaches the client.
const genericMessage = "an unexpected error occurred; please retry later"

// TestS3Faults covers acceptance 3 of issue 12 and acceptance 2 of issue
// 32 on a private S3 server that the test stops and starts, with a bucket
// that already holds objects of both layouts (at keys under blobs/, at
// addresses under objects/, as the previous release wrote them) and a
// temp object an earlier release left under tmp/: the store stopped
// mid-upload, a client that goes away mid-upload, the gateway killed
// (SIGKILL) mid-upload, a hash mismatch of a streamed upload, reads with
// the store down, before and during the response, and uploads of bytes
// already held (dedup) and deletes down to the last record. After each,
// once swept, the bucket holds exactly what the records name (no orphan)
// and every record's bytes read back whole (none lost).
func TestS3Faults(t *testing.T) {
	t.Parallel()
	srv := s3test.StartServer(t)
	bucket := srv.Bucket(t)
	store, err := s3blob.New(s3blob.Config{Endpoint: bucket.Endpoint, Bucket: bucket.Bucket, Region: bucket.Region,
		AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg := siteConfig(fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 64MiB",
		pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile("part_size 5MiB")), "comfy_auth none")
	g := gateway.Start(t, cfg, gateway.Options{})
	parent := t                   // the restarted gateway outlives its subtest
	data := randomBytes(30 << 20) // six parts
	seeded := seedBothLayouts(t, g, bucket)
	// nothingInBucket: nothing but the seeded objects, each read back whole.
	nothingInBucket := func(t *testing.T) {
		t.Helper()
		if keys := bucket.Keys(t, ""); !sameKeys(keys, seeded.keys) {
			t.Fatalf("the bucket holds %v, want only the seeded %v", keys, seeded.keys)
		}
		seeded.readBack(t, g)
	}
	uploading := func() bool {
		for _, k := range bucket.Keys(t, "") {
			if strings.Contains(k, "?uploadId=") {
				return true
			}
		}
		return false
	}
	// sweep is what the gateway's sweeper does once leftovers are an hour
	// old, without waiting the hour.
	sweep := func(t *testing.T) {
		t.Helper()
		if _, err := store.Sweep(context.Background(), 0); err != nil {
			t.Fatalf("sweep: %v", err)
		}
	}

	t.Run("store stopped mid-upload", func(t *testing.T) {
		key := uuid.NewString()
		stopped := make(chan struct{})
		go func() {
			// Stop the store once the gateway has begun a multipart upload.
			defer close(stopped)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) {
				if uploading() {
					srv.Stop(t)
					return
				}
				time.Sleep(20 * time.Millisecond)
			}
		}()
		r := paceUpload(t, g, key, data, stopped)
		if r.Status != http.StatusInternalServerError || r.errorCode(t) != "upstream_error" {
			t.Fatalf("got %d %s, want 500 upstream_error", r.Status, r.Body)
		}
		if msg := r.JSON(t)["error"].(map[string]any)["message"]; msg != genericMessage {
			t.Errorf("message %q leaks more than the generic one", msg)
		}
		srv.Start(t)
		left := bucket.Keys(t, "")
		t.Logf("left after the failure (the abort could not reach the stopped store): %v", left)
		sweep(t)
		if left := bucket.Keys(t, tempDir); len(left) != 0 {
			t.Fatalf("the earlier release's temp object was not swept: %v", left)
		}
		nothingInBucket(t)
		if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hashOf(data), nil, nil); r.Status != http.StatusNotFound {
			t.Errorf("HEAD by-hash of the failed upload: %d", r.Status)
		}
		// The key is free again: the same request now succeeds.
		retry := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(data, "big.bin")...)
		if retry.Status != http.StatusCreated {
			t.Fatalf("retry with the same key: %d %s", retry.Status, retry.Body)
		}
		deleteAsset(t, g, retry.JSON(t)["id"].(string))
		nothingInBucket(t)
	})

	t.Run("client gone mid-upload", func(t *testing.T) {
		gone := make(chan struct{})
		go func() {
			defer close(gone)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && !uploading() {
				time.Sleep(20 * time.Millisecond)
			}
		}()
		paceUpload(t, g, "", data, gone) // cut when gone closes
		// The gateway aborts on its own; nothing waits for a sweep.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && uploading() {
			time.Sleep(50 * time.Millisecond)
		}
		nothingInBucket(t)
	})

	t.Run("gateway killed mid-upload", func(t *testing.T) {
		killed := make(chan struct{})
		go func() {
			defer close(killed)
			deadline := time.Now().Add(30 * time.Second)
			for time.Now().Before(deadline) && !uploading() {
				time.Sleep(20 * time.Millisecond)
			}
			g.Kill()
		}()
		paceUpload(t, g, "", data, killed)
		<-killed
		g = gateway.Start(parent, cfg, gateway.Options{Port: g.Port})
		if !uploading() {
			t.Fatal("nothing of the killed upload is left to sweep: the kill came too late to test anything")
		}
		sweep(t) // what the restarted gateway's sweeper does an hour on
		nothingInBucket(t)
		retry := upload(t, g, nil, uploadParts(data, "after-kill.bin")...)
		if retry.Status != http.StatusCreated {
			t.Fatalf("the upload again after the restart: %d %s", retry.Status, retry.Body)
		}
		deleteAsset(t, g, retry.JSON(t)["id"].(string))
		nothingInBucket(t)
	})

	t.Run("hash mismatch of a streamed upload", func(t *testing.T) {
		r := upload(t, g, nil, uploadParts(data, "big.bin", part{name: "expected_hash", value: hashOf([]byte("other"))})...)
		if r.Status != http.StatusConflict || r.errorCode(t) != "hash_mismatch" {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		nothingInBucket(t)
	})

	t.Run("store down on read", func(t *testing.T) {
		up := upload(t, g, nil, uploadParts(data, "read.bin")...)
		if up.Status != http.StatusCreated {
			t.Fatalf("upload: %d %s", up.Status, up.Body)
		}
		content := g.URL + "/api/v2/assets/" + up.JSON(t)["id"].(string) + "/content"

		// Down before the request: an error, not a 200.
		srv.Stop(t)
		for _, hdr := range []map[string]string{nil, {"Range": "bytes=100-199"}} {
			r := do(t, http.MethodGet, content, nil, hdr)
			if r.Status != http.StatusInternalServerError || r.errorCode(t) != "upstream_error" {
				t.Errorf("GET with the store down (%v): %d %.200s", hdr, r.Status, r.Body)
			}
		}
		if r := do(t, http.MethodHead, content, nil, nil); r.Status != http.StatusInternalServerError {
			t.Errorf("HEAD with the store down: %d", r.Status)
		}
		srv.Start(t)

		// Down mid-response: the transfer fails; it never ends as a
		// complete-looking 200 with fewer bytes.
		resp, err := http.Get(content)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET: %d", resp.StatusCode)
		}
		head := make([]byte, 1<<20)
		if _, err := io.ReadFull(resp.Body, head); err != nil {
			t.Fatal(err)
		}
		srv.Stop(t)
		rest, err := io.ReadAll(resp.Body)
		got := int64(len(head) + len(rest))
		if err == nil {
			if !bytes.Equal(append(head, rest...), data) {
				t.Fatalf("a read cut by the store ended cleanly with %d of %d bytes", got, len(data))
			}
			t.Log("the whole object had left the store before it stopped")
		} else if !errors.Is(err, io.ErrUnexpectedEOF) && !strings.Contains(err.Error(), "connection reset") {
			t.Fatalf("read after the store stopped: %v", err)
		} else {
			t.Logf("the transfer failed after %d of %d bytes: %v", got, len(data), err)
		}
		srv.Start(t)
		deleteAsset(t, g, up.JSON(t)["id"].(string))
		nothingInBucket(t)
	})

	t.Run("dedup over both layouts, then every record deleted", func(t *testing.T) {
		// Each seeded blob's bytes again, with and without the hash: no
		// new object, the seeded one serves them.
		var again []string
		for i, b := range seeded.blobs {
			for _, declared := range []bool{false, true} {
				var extra []part
				if declared {
					extra = append(extra, part{name: "expected_hash", value: hashOf(b.data)})
				}
				r := upload(t, g, nil, uploadParts(b.data, fmt.Sprintf("again-%d-%v.bin", i, declared), extra...)...)
				if r.Status != http.StatusCreated && r.Status != http.StatusOK {
					t.Fatalf("upload of seeded bytes: %d %s", r.Status, r.Body)
				}
				again = append(again, r.JSON(t)["id"].(string))
			}
		}
		nothingInBucket(t)
		for _, id := range again {
			deleteAsset(t, g, id)
		}
		nothingInBucket(t)
		// The last record of each goes: its object with it, whatever its
		// layout.
		for _, b := range seeded.blobs {
			deleteAsset(t, g, b.id)
		}
		if keys := bucket.Keys(t, ""); len(keys) != 0 {
			t.Fatalf("the bucket holds %v after the last records went", keys)
		}
	})
}

// tempDir is where the release before issue 32 staged uploads.
const tempDir = "tmp/"

// seededBlob is one asset the bucket held before a test's faults.
type seededBlob struct {
	id   string
	data []byte
}

// seed is what seedBothLayouts put in the bucket.
type seed struct {
	blobs []seededBlob
	keys  []string // the bucket's keys once seeded (without the temp object)
}

// seedBothLayouts uploads assets of both layouts through g (one part and
// several; with expected_hash they are at their address, as every object
// the previous release kept) and leaves an earlier release's temp object
// under tmp/, which the first sweep must remove.
func seedBothLayouts(t *testing.T, g *gateway.Gateway, bucket s3test.Config) seed {
	t.Helper()
	var s seed
	for i, c := range []struct {
		size     int
		declared bool
	}{{70_000, false}, {6<<20 + 11, false}, {80_000, true}, {6<<20 + 13, true}} {
		data := randomBytes(c.size)
		var extra []part
		if c.declared {
			extra = append(extra, part{name: "expected_hash", value: hashOf(data)})
		}
		r := upload(t, g, nil, uploadParts(data, fmt.Sprintf("seed-%d.bin", i), extra...)...)
		if r.Status != http.StatusCreated {
			t.Fatalf("seeding: %d %s", r.Status, r.Body)
		}
		s.blobs = append(s.blobs, seededBlob{id: r.JSON(t)["id"].(string), data: data})
	}
	s.keys = bucket.Keys(t, "")
	var keyed, addressed int
	for _, k := range s.keys {
		if strings.HasPrefix(k, "blobs/") {
			keyed++
		} else if strings.HasPrefix(k, "objects/") {
			addressed++
		}
	}
	if keyed != 2 || addressed != 2 {
		t.Fatalf("seeded %v, want two objects of each layout", s.keys)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	left := []byte("an upload of the release before, cut before its copy")
	if _, err := bucket.Client(t).PutObject(ctx, bucket.Bucket, tempDir+"20250101T000000-"+strings.Repeat("ab", 16),
		bytes.NewReader(left), int64(len(left)), minio.PutObjectOptions{}); err != nil {
		t.Fatal(err)
	}
	return s
}

// readBack checks that every seeded asset serves its bytes.
func (s seed) readBack(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	for _, b := range s.blobs {
		r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+b.id+"/content", nil, nil)
		if r.Status != http.StatusOK || !bytes.Equal(r.Body, b.data) {
			t.Fatalf("seeded asset %s: %d, %d bytes; want its %d", b.id, r.Status, len(r.Body), len(b.data))
		}
	}
}

// sameKeys reports whether got and want list the same keys.
func sameKeys(got, want []string) bool {
	return slices.Equal(slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want)))
}

// paceUpload posts data as an upload with the given Idempotency-Key ("" for
// none) at a steady pace, so that the test can act while the body is on its
// way. When stop closes, the rest of the body is still sent (the gateway
// answers when it sees the failure) unless key is "", in which case the
// client goes away at once.
func paceUpload(t *testing.T, g *gateway.Gateway, key string, data []byte, stop <-chan struct{}) response {
	t.Helper()
	body, ct := multipartBody(t, uploadParts(data, "big.bin")...)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		b := body.Bytes()
		for len(b) > 0 {
			n := min(len(b), 256<<10)
			if _, err := pw.Write(b[:n]); err != nil {
				return
			}
			b = b[n:]
			select {
			case <-stop:
				if key == "" {
					cancel()
					pw.CloseWithError(errors.New("client gone"))
					return
				}
			default:
				time.Sleep(2 * time.Millisecond)
			}
		}
		pw.Close()
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.URL+"/api/v2/assets", pr)
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = int64(body.Len())
	req.Header.Set("Content-Type", ct)
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if key == "" {
			return response{}
		}
		t.Fatalf("upload: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{gateway.Response{Status: resp.StatusCode, Header: resp.Header, Body: b}}
}
