package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// genericMessage is the message of every upstream_error: nothing of the
// store's own error reaches the client.
const genericMessage = "an unexpected error occurred; please retry later"

// TestS3Faults covers acceptance 3 of issue 12 on a private S3 server that
// the test stops and starts: the store stopped mid-upload, a client that
// goes away mid-upload, a hash mismatch of a streamed upload, and reads
// with the store down, before and during the response.
func TestS3Faults(t *testing.T) {
	t.Parallel()
	srv := s3test.StartServer(t)
	bucket := srv.Bucket(t)
	store, err := s3blob.New(s3blob.Config{Endpoint: bucket.Endpoint, Bucket: bucket.Bucket, Region: bucket.Region,
		AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.Start(t, siteConfig(fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 64MiB",
		pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile("part_size 5MiB")), "comfy_auth none"), gateway.Options{})
	data := randomBytes(30 << 20) // six parts
	nothingInBucket := func(t *testing.T) {
		t.Helper()
		if keys := bucket.Keys(t, ""); len(keys) != 0 {
			t.Fatalf("the bucket holds %v", keys)
		}
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
				if keys := bucket.Keys(t, "blobs/"); len(keys) > 0 {
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
			for time.Now().Before(deadline) && len(bucket.Keys(t, "blobs/")) == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}()
		paceUpload(t, g, "", data, gone) // cut when gone closes
		// The gateway aborts on its own; nothing waits for a sweep.
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) && len(bucket.Keys(t, "")) != 0 {
			time.Sleep(50 * time.Millisecond)
		}
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
	})
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
