package integration

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

func TestAssetsLifecycle(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, b)
			data := randomBytes(300_000)
			hash := hashOf(data)

			first := upload(t, g, nil, uploadParts(data, "in/photo.png", part{name: "expected_hash", value: hash}, part{name: "tags", value: "input"})...)
			if first.Status != http.StatusCreated {
				t.Fatalf("first upload: %d %s", first.Status, first.Body)
			}
			a := first.JSON(t)
			id, _ := a["id"].(string)
			if a["hash"] != hash || a["created_new"] != true || a["size_bytes"] != float64(len(data)) ||
				a["content_type"] != "image/png" || a["file_path"] != "in/photo.png" {
				t.Fatalf("first asset: %s", first.Body)
			}
			if _, has := a["job_id"]; has {
				t.Errorf("uploaded asset carries job_id: %s", first.Body)
			}
			if u, _ := a["url"].(string); u != g.URL+"/api/v2/assets/"+id+"/content" {
				t.Errorf("url %q", u)
			}
			for _, k := range []string{"created_at", "url_expires_at"} {
				if _, err := time.Parse(time.RFC3339, a[k].(string)); err != nil {
					t.Errorf("%s: %v", k, err)
				}
			}

			// The same bytes again: a dedup hit on the caller's own bytes.
			second := upload(t, g, nil, uploadParts(data, "other.png")...)
			if second.Status != http.StatusOK || second.JSON(t)["created_new"] != false {
				t.Fatalf("second upload: %d %s", second.Status, second.Body)
			}
			secondID := second.JSON(t)["id"].(string)
			if secondID == id {
				t.Fatal("second upload returned the first record")
			}

			// HEAD by-hash, raw and URL-encoded.
			for _, h := range []string{hash, url.PathEscape(hash), strings.Replace(hash, ":", "%3A", 1)} {
				if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+h, nil, nil); r.Status != http.StatusOK {
					t.Errorf("HEAD by-hash %s: %d", h, r.Status)
				}
			}
			// from-hash with an identical reference returns it as-is.
			fh := do(t, http.MethodPost, g.URL+"/api/v2/assets/from-hash", strings.NewReader(`{"hash":"`+hash+`","file_path":"in/photo.png"}`), map[string]string{"Content-Type": "application/json"})
			if fh.Status != http.StatusOK || fh.JSON(t)["id"] != id {
				t.Fatalf("from-hash identical: %d %s", fh.Status, fh.Body)
			}
			// from-hash with a new path mints a record over the same bytes.
			fh2 := do(t, http.MethodPost, g.URL+"/api/v2/assets/from-hash", strings.NewReader(`{"hash":"`+hash+`","file_path":"third.png"}`), nil)
			if fh2.Status != http.StatusCreated || fh2.JSON(t)["id"] == id || fh2.JSON(t)["size_bytes"] != float64(len(data)) {
				t.Fatalf("from-hash new path: %d %s", fh2.Status, fh2.Body)
			}
			thirdID := fh2.JSON(t)["id"].(string)

			// Content whole and by range.
			whole := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, nil)
			if whole.Status != http.StatusOK || !bytes.Equal(whole.Body, data) || whole.Header.Get("Content-Type") != "image/png" {
				t.Fatalf("content: %d, %d bytes", whole.Status, len(whole.Body))
			}
			part := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, map[string]string{"Range": "bytes=100-199"})
			if part.Status != http.StatusPartialContent || !bytes.Equal(part.Body, data[100:200]) ||
				part.Header.Get("Content-Range") != fmt.Sprintf("bytes 100-199/%d", len(data)) {
				t.Fatalf("range: %d %q", part.Status, part.Header.Get("Content-Range"))
			}
			// The refusals are in the envelope (http.ServeContent writes a
			// 416 as text and a 412 with no body).
			if r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, map[string]string{"Range": "bytes=999999999-"}); r.Status != http.StatusRequestedRangeNotSatisfiable ||
				r.errorCode(t) != "range_not_satisfiable" || r.Header.Get("Content-Range") != fmt.Sprintf("bytes */%d", len(data)) {
				t.Errorf("unsatisfiable range: %d %q %s", r.Status, r.Header.Get("Content-Range"), r.Body)
			}
			if r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+id+"/content", nil, map[string]string{"If-Match": `"other"`}); r.Status != http.StatusPreconditionFailed ||
				r.errorCode(t) != "precondition_failed" || r.Header.Get("Content-Type") != "application/json" {
				t.Errorf("failed If-Match: %d %q %s", r.Status, r.Header.Get("Content-Type"), r.Body)
			}
			if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/"+id+"/content", nil, nil); r.Status != http.StatusOK ||
				r.Header.Get("Content-Length") != fmt.Sprint(len(data)) || len(r.Body) != 0 {
				t.Errorf("HEAD content: %d, Content-Length %q, %d body bytes", r.Status, r.Header.Get("Content-Length"), len(r.Body))
			}

			// Deleting records: the bytes stay until the last one goes.
			for i, del := range []string{id, secondID} {
				if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+del, nil, nil); r.Status != http.StatusNoContent {
					t.Fatalf("delete %d: %d %s", i, r.Status, r.Body)
				}
			}
			if r := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+thirdID+"/content", nil, nil); !bytes.Equal(r.Body, data) {
				t.Fatalf("remaining record lost its bytes: %d", r.Status)
			}
			if len(blobFiles(t, g, "objects")) != 1 {
				t.Fatalf("objects before last delete: %v", blobFiles(t, g, "objects"))
			}
			if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+thirdID, nil, nil); r.Status != http.StatusNoContent {
				t.Fatalf("last delete: %d", r.Status)
			}
			if files := blobFiles(t, g, "objects"); len(files) != 0 {
				t.Errorf("bytes left after the last record went: %v", files)
			}
			// A second delete and a get are 404 not_found.
			for _, m := range []string{http.MethodDelete, http.MethodGet} {
				r := do(t, m, g.URL+"/api/v2/assets/"+id, nil, nil)
				if r.Status != http.StatusNotFound || r.errorCode(t) != "not_found" {
					t.Errorf("%s deleted: %d %s", m, r.Status, r.Body)
				}
			}
			if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hash, nil, nil); r.Status != http.StatusNotFound {
				t.Errorf("HEAD by-hash after delete: %d", r.Status)
			}
		})
	}
}

// TestUploadBadInputs checks every refusal: its status and code, and that it
// leaves no record, no bytes, no temp file and no claim behind.
func TestUploadBadInputs(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, b)
			data := randomBytes(10_000)
			ok := uploadParts(data, "ok.png")
			cases := []struct {
				name   string
				parts  []part
				status int
				code   string
			}{
				{"missing file", []part{{name: "content_type", value: "image/png"}, {name: "file_path", value: "a.png"}}, 422, "invalid_request"},
				{"missing file_path", []part{{name: "content_type", value: "image/png"}, {name: "file", filename: "a", data: data}}, 422, "invalid_request"},
				{"missing content_type", []part{{name: "file_path", value: "a.png"}, {name: "file", filename: "a", data: data}}, 422, "invalid_request"},
				{"duplicate file", append(uploadParts(data, "a.png"), part{name: "file", filename: "b", data: data}), 422, "invalid_request"},
				{"duplicate file_path", append([]part{{name: "file_path", value: "x.png"}}, ok...), 422, "invalid_request"},
				{"file first, file_path missing", []part{{name: "file", filename: "a", data: data}, {name: "content_type", value: "image/png"}}, 422, "invalid_request"},
				{"expires_in too small", uploadParts(data, "a.png", part{name: "expires_in", value: "59"}), 422, "invalid_request"},
				{"expires_in too large", uploadParts(data, "a.png", part{name: "expires_in", value: "604801"}), 422, "invalid_request"},
				{"expires_in not a number", uploadParts(data, "a.png", part{name: "expires_in", value: "soon"}), 422, "invalid_request"},
				{"dot-dot path", uploadParts(data, "a/../../etc/passwd"), 422, "invalid_request"},
				{"absolute path", uploadParts(data, "/etc/passwd"), 422, "invalid_request"},
				{"NUL in path", uploadParts(data, "a\x00b.png"), 422, "invalid_request"},
				{"path over 1024 bytes", uploadParts(data, strings.Repeat("a", 1025)), 422, "invalid_request"},
				{"wrong expected_hash", uploadParts(data, "a.png", part{name: "expected_hash", value: hashOf([]byte("other"))}), 409, "hash_mismatch"},
				{"file over the limit", uploadParts(randomBytes(4<<20+1), "big.png"), 413, "payload_too_large"},
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					key := uuid.NewString()
					r := upload(t, g, map[string]string{"Idempotency-Key": key}, c.parts...)
					if r.Status != c.status || r.errorCode(t) != c.code {
						t.Fatalf("got %d %s, want %d %s", r.Status, r.Body, c.status, c.code)
					}
					if c.code == "hash_mismatch" && r.Header.Get("Retry-After") == "" {
						t.Error("hash_mismatch without Retry-After")
					}
					assertNothingLeft(t, g, data)
					// The claim was released: the same key works for a good upload.
					ok := upload(t, g, map[string]string{"Idempotency-Key": key}, uploadParts(randomBytes(100), "retry.png")...)
					if ok.Status != http.StatusCreated {
						t.Fatalf("retry with the released key: %d %s", ok.Status, ok.Body)
					}
					deleteAsset(t, g, ok.JSON(t)["id"].(string))
				})
			}
			t.Run("not multipart", func(t *testing.T) {
				r := do(t, http.MethodPost, g.URL+"/api/v2/assets", strings.NewReader("{}"), map[string]string{"Content-Type": "application/json"})
				if r.Status != 400 || r.errorCode(t) != "invalid_request" {
					t.Fatalf("got %d %s", r.Status, r.Body)
				}
			})
			t.Run("declared length over the limit", func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v2/assets", io.LimitReader(zeroReader{}, 6<<20))
				req.ContentLength = 6 << 20
				req.Header.Set("Content-Type", "multipart/form-data; boundary=x")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				r := response{gateway.Response{Status: resp.StatusCode, Body: b}}
				if r.Status != 413 || r.errorCode(t) != "payload_too_large" {
					t.Fatalf("got %d %s", r.Status, b)
				}
			})
			t.Run("chunked body over the limit", func(t *testing.T) {
				body, ct := multipartBody(t, uploadParts(randomBytes(6<<20), "big.png")...)
				req, _ := http.NewRequest(http.MethodPost, g.URL+"/api/v2/assets", io.NopCloser(body))
				req.ContentLength = -1 // chunked
				req.Header.Set("Content-Type", ct)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if r := (response{gateway.Response{Status: resp.StatusCode, Body: b}}); r.Status != 413 || r.errorCode(t) != "payload_too_large" {
					t.Fatalf("got %d %s", r.Status, b)
				}
				assertNothingLeft(t, g, nil)
			})
			t.Run("client disconnect mid-upload", func(t *testing.T) {
				if b.remoteBlobs {
					// Nothing of a body under one part reaches the bucket
					// before it is complete; TestS3Faults cuts a multi-part one.
					return
				}
				body, ct := multipartBody(t, uploadParts(randomBytes(1<<20), "cut.png")...)
				conn, err := net.Dial("tcp", strings.TrimPrefix(g.URL, "http://"))
				if err != nil {
					t.Fatal(err)
				}
				fmt.Fprintf(conn, "POST /api/v2/assets HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", ct, body.Len())
				conn.Write(body.Bytes()[:body.Len()/2])
				// Cut the connection only once the gateway is visibly staging
				// the upload, so the test checks the cleanup of a real one.
				deadline := time.Now().Add(30 * time.Second)
				for len(blobFiles(t, g, "tmp")) == 0 {
					if time.Now().After(deadline) {
						t.Fatal("the gateway never started staging the upload")
					}
					time.Sleep(10 * time.Millisecond)
				}
				conn.Close()
				waitNothingLeft(t, g)
			})
		})
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func deleteAsset(t *testing.T, g *gateway.Gateway, id string) {
	t.Helper()
	if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+id, nil, nil); r.Status != http.StatusNoContent {
		t.Fatalf("delete %s: %d %s", id, r.Status, r.Body)
	}
}

// assertNothingLeft checks that no upload is staged, no bytes are stored and,
// when data is given, no record over data exists.
func assertNothingLeft(t *testing.T, g *gateway.Gateway, data []byte) {
	t.Helper()
	if tmp := blobFiles(t, g, "tmp"); len(tmp) != 0 {
		t.Errorf("temp files left: %v", tmp)
	}
	if objs := blobFiles(t, g, "objects"); len(objs) != 0 {
		t.Errorf("objects left: %v", objs)
	}
	if data != nil {
		if r := do(t, http.MethodHead, g.URL+"/api/v2/assets/by-hash/"+hashOf(data), nil, nil); r.Status != http.StatusNotFound {
			t.Errorf("a record over the refused bytes exists: HEAD by-hash %d", r.Status)
		}
	}
}

// waitNothingLeft waits for the gateway to notice a dropped request and
// clean up after it, then checks that nothing was left.
func waitNothingLeft(t *testing.T, g *gateway.Gateway) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && len(blobFiles(t, g, "tmp")) != 0 {
		time.Sleep(50 * time.Millisecond)
	}
	assertNothingLeft(t, g, nil)
}
