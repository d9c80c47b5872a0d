package ingest

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/zeebo/blake3"
)

func blakeHash(b []byte) string {
	sum := blake3.Sum256(b)
	return "blake3:" + hex.EncodeToString(sum[:])
}

func pseudoRandom(n int) []byte {
	b := make([]byte, n)
	x := uint32(2463534242)
	for i := range b {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b[i] = byte(x)
	}
	return b
}

func TestParseAccepts(t *testing.T) {
	data := []byte("\x89PNG fake image bytes")
	hash := blakeHash(data)
	tests := []struct {
		name   string
		fields []field
		limit  int64 // 0: none; -1: exactly the body length
		want   Request
	}{
		{
			name:   "minimal",
			fields: []field{text("content_type", "image/png"), text("file_path", "photo.png"), file(data)},
			want:   Request{ContentType: "image/png", FilePath: "photo.png"},
		},
		{
			name: "every field, metadata after the file too",
			fields: []field{
				text("file_path", "models/checkpoints/x.safetensors"),
				text("content_type", "IMAGE/PNG; Charset=utf-8"),
				text("expected_hash", "blake3:"+strings.ToUpper(hash[len("blake3:"):])),
				text("tags", "input"),
				file(data),
				text("tags", `["a", "b c"]`),
				text("expires_in", " 604800 "),
			},
			want: Request{
				ContentType: "image/png; charset=utf-8", FilePath: "models/checkpoints/x.safetensors",
				ExpectedHash: hash, Tags: []string{"input", "a", "b c"}, ExpiresIn: 604800,
			},
		},
		{
			name:   "path is cleaned",
			fields: []field{text("content_type", "image/png"), text("file_path", "./a//b/./c.png"), file(data), text("expires_in", "60")},
			want:   Request{ContentType: "image/png", FilePath: "a/b/c.png", ExpiresIn: 60},
		},
		{
			name:   "unicode and spaces in path",
			fields: []field{text("content_type", "image/png"), text("file_path", "фото/my photo.png"), file(data)},
			want:   Request{ContentType: "image/png", FilePath: "фото/my photo.png"},
		},
		{
			name:   "empty JSON tag array",
			fields: []field{text("content_type", "image/png"), text("file_path", "p.png"), text("tags", "[]"), file(data)},
			want:   Request{ContentType: "image/png", FilePath: "p.png"},
		},
		{
			name:   "body exactly at the limit",
			fields: []field{text("content_type", "image/png"), text("file_path", "photo.png"), file(data)},
			limit:  -1,
			want:   Request{ContentType: "image/png", FilePath: "photo.png"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			body, ct := buildBody(t, tt.fields...)
			limit := tt.limit
			if limit == -1 {
				limit = int64(len(body))
			}
			req, err := Parse(context.Background(), bytes.NewReader(body), ct, s, Limits{MaxBytes: limit})
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			defer req.Upload.Abort()
			if req.Hash != hash || req.Size != int64(len(data)) {
				t.Fatalf("hash, size = %s, %d; want %s, %d", req.Hash, req.Size, hash, len(data))
			}
			if req.ContentType != tt.want.ContentType || req.FilePath != tt.want.FilePath ||
				req.ExpectedHash != tt.want.ExpectedHash || req.ExpiresIn != tt.want.ExpiresIn ||
				strings.Join(req.Tags, "|") != strings.Join(tt.want.Tags, "|") {
				t.Fatalf("got %+v\nwant %+v", *req, tt.want)
			}
			obj, err := req.Upload.Publish(nil)
			if err != nil {
				t.Fatalf("Publish: %v", err)
			}
			f, _, err := s.Open(context.Background(), obj, 0)
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer f.Close()
			if got, _ := io.ReadAll(f); !bytes.Equal(got, data) {
				t.Fatalf("stored %q, want %q", got, data)
			}
			if left := filesUnder(t, filepath.Join(s.Dir(), "tmp")); len(left) != 0 {
				t.Fatalf("temp files left: %v", left)
			}
		})
	}
}

func TestParseEmptyFile(t *testing.T) {
	s := newStore(t)
	body, ct := buildBody(t, text("content_type", "text/plain"), text("file_path", "empty.txt"), file(nil))
	req, err := Parse(context.Background(), bytes.NewReader(body), ct, s, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer req.Upload.Abort()
	if req.Size != 0 || req.Hash != blakeHash(nil) {
		t.Fatalf("got %s, %d; want the empty blob", req.Hash, req.Size)
	}
}

// TestParseRejects covers every refusal; after each, no temp file or object
// may remain.
func TestParseRejects(t *testing.T) {
	data := []byte("some bytes")
	ct := text("content_type", "image/png")
	fp := text("file_path", "photo.png")
	ok := func(extra ...field) []field { return append([]field{ct, fp}, extra...) }
	withPath := func(p string) []field { return []field{ct, text("file_path", p), file(data)} }
	manyTags := make([]field, 0, MaxTags+1)
	for i := 0; i <= MaxTags; i++ {
		manyTags = append(manyTags, text("tags", "t"))
	}
	validBody, validCT := buildBody(t, ok(file(data))...)

	tests := []struct {
		name       string
		fields     []field
		rawBody    []byte // used instead of fields when set
		header     string // Content-Type header; defaults to the built body's
		limit      int64
		noInit     bool
		wantStatus int
		wantCode   string
		wantMsg    string
	}{
		{name: "json content type", fields: ok(file(data)), header: "application/json", wantStatus: 400, wantCode: "invalid_request"},
		{name: "multipart/mixed", fields: ok(file(data)), header: "multipart/mixed; boundary=x", wantStatus: 400, wantCode: "invalid_request"},
		{name: "no boundary", fields: ok(file(data)), header: "multipart/form-data", wantStatus: 400, wantCode: "invalid_request"},
		{name: "unparsable header", fields: ok(file(data)), header: "multipart/form-data; boundary", wantStatus: 400, wantCode: "invalid_request"},
		{name: "garbage body", rawBody: []byte("this is not\r\nmultipart\r\n"), header: "multipart/form-data; boundary=xyz", wantStatus: 400, wantCode: "invalid_request"},
		{name: "empty body", rawBody: []byte{}, header: "multipart/form-data; boundary=xyz", wantStatus: 400, wantCode: "invalid_request"},
		{name: "truncated mid-file", rawBody: validBody[:len(validBody)-len("\r\n--")-60], header: validCT, wantStatus: 400, wantCode: "invalid_request"},
		{name: "no parts", rawBody: []byte("--xyz--\r\n"), header: "multipart/form-data; boundary=xyz", wantStatus: 422, wantCode: "invalid_request"},
		{name: "missing file", fields: ok(), wantStatus: 422, wantCode: "invalid_request", wantMsg: "the file part is required"},
		{name: "missing file_path", fields: []field{ct}, wantStatus: 422, wantCode: "invalid_request", wantMsg: "file_path is required"},
		{name: "duplicate file", fields: ok(file(data), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "duplicate content_type", fields: []field{ct, ct, fp, file(data)}, wantStatus: 422, wantCode: "invalid_request"},
		{name: "duplicate file_path", fields: []field{ct, fp, fp, file(data)}, wantStatus: 422, wantCode: "invalid_request"},
		{name: "duplicate expires_in", fields: ok(text("expires_in", "60"), file(data), text("expires_in", "60")), wantStatus: 422, wantCode: "invalid_request"},
		{name: "duplicate expected_hash", fields: ok(text("expected_hash", blakeHash(data)), text("expected_hash", blakeHash(data)), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "unknown part", fields: ok(text("colour", "red"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "unknown part after file", fields: ok(file(data), text("tags[]", "x")), wantStatus: 422, wantCode: "invalid_request"},
		{name: "unnamed part", rawBody: []byte("--xyz\r\nContent-Disposition: form-data\r\n\r\nx\r\n--xyz--\r\n"), header: "multipart/form-data; boundary=xyz", wantStatus: 422, wantCode: "invalid_request"},
		{name: "oversized metadata part", fields: ok(text("tags", strings.Repeat("x", MaxFieldBytes+1)), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "huge metadata part", fields: []field{text("content_type", strings.Repeat("a", 4<<20)), fp, file(data)}, wantStatus: 422, wantCode: "invalid_request"},
		{name: "empty file_path", fields: withPath(""), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path too long", fields: withPath(strings.Repeat("a", MaxFilePathBytes+1)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path absolute", fields: withPath("/etc/passwd"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path backslash root", fields: withPath(`\\server\share\x`), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path drive letter", fields: withPath(`C:\x.png`), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path drive relative", fields: withPath(`c:x.png`), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path dotdot", fields: withPath("a/../../b.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path bare dotdot", fields: withPath(".."), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path backslash dotdot", fields: withPath(`a\..\..\b.png`), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path dot", fields: withPath("."), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path dot slash", fields: withPath("./"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path trailing slash", fields: withPath("dir/"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path NUL", fields: withPath("a\x00b.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path newline", fields: withPath("a\nb.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path DEL", fields: withPath("a\x7fb.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path C1 control", fields: withPath("a\u0085b.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "file_path invalid UTF-8", fields: withPath("a\xffb.png"), wantStatus: 422, wantCode: "invalid_request"},
		{name: "empty content_type", fields: []field{text("content_type", ""), fp, file(data)}, wantStatus: 422, wantCode: "invalid_request"},
		{name: "bad content_type", fields: []field{text("content_type", "image/png; =x"), fp, file(data)}, wantStatus: 422, wantCode: "invalid_request"},
		{name: "expires_in too small", fields: ok(text("expires_in", "59"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "expires_in too large", fields: ok(text("expires_in", "604801"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "expires_in not an integer", fields: ok(text("expires_in", "1.5e3"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "expires_in empty", fields: ok(file(data), text("expires_in", "")), wantStatus: 422, wantCode: "invalid_request"},
		{name: "expected_hash other algorithm", fields: ok(text("expected_hash", "sha256:"+strings.Repeat("0", 64)), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "expected_hash short", fields: ok(text("expected_hash", "blake3:abc"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "empty tag", fields: ok(text("tags", ""), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "tags not strings", fields: ok(text("tags", "[1,2]"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "tags bad JSON", fields: ok(text("tags", `["a"`), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "tags empty element", fields: ok(text("tags", `["a",""]`), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "tag too long", fields: ok(text("tags", strings.Repeat("t", MaxTagBytes+1)), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "tag control char", fields: ok(text("tags", "a\tb"), file(data)), wantStatus: 422, wantCode: "invalid_request"},
		{name: "too many tags", fields: append(ok(file(data)), manyTags...), wantStatus: 422, wantCode: "invalid_request"},
		{name: "hash mismatch", fields: ok(text("expected_hash", blakeHash([]byte("other"))), file(data)), wantStatus: 409, wantCode: "hash_mismatch"},
		{name: "hash mismatch sent after file", fields: ok(file(data), text("expected_hash", blakeHash([]byte("other")))), wantStatus: 409, wantCode: "hash_mismatch"},
		{name: "over the limit in the file", fields: ok(file(pseudoRandom(3 << 20))), limit: 1 << 20, wantStatus: 413, wantCode: "payload_too_large"},
		{name: "over the limit in metadata", fields: ok(file(data)), limit: 100, wantStatus: 413, wantCode: "payload_too_large"},
		{name: "over the limit by one byte", rawBody: validBody, header: validCT, limit: int64(len(validBody)) - 1, wantStatus: 413, wantCode: "payload_too_large"},
		{name: "store not initialised", fields: ok(file(data)), noInit: true, wantStatus: 500, wantCode: "upstream_error"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			if tt.noInit {
				s = blob.NewFileSystem(filepath.Join(t.TempDir(), "never-initialised"))
			}
			body, header := tt.rawBody, tt.header
			if tt.rawBody == nil {
				var built string
				body, built = buildBody(t, tt.fields...)
				if header == "" {
					header = built
				}
			}
			req, err := Parse(context.Background(), bytes.NewReader(body), header, s, Limits{MaxBytes: tt.limit})
			if err == nil {
				req.Upload.Abort()
				t.Fatalf("Parse succeeded: %+v", *req)
			}
			ae, isAPI := apierr.As(err)
			if !isAPI {
				t.Fatalf("error %v (%T) is not an *apierr.Error", err, err)
			}
			if ae.Status != tt.wantStatus || ae.Code != tt.wantCode {
				t.Fatalf("got %d %s (%v); want %d %s", ae.Status, ae.Code, err, tt.wantStatus, tt.wantCode)
			}
			if tt.wantMsg != "" && ae.Message != tt.wantMsg {
				t.Fatalf("message %q, want %q", ae.Message, tt.wantMsg)
			}
			if ae.Code == "hash_mismatch" && ae.RetryAfter <= 0 {
				t.Fatalf("hash_mismatch without Retry-After")
			}
			if !tt.noInit {
				assertNoLeftovers(t, s)
			}
		})
	}
}

// TestParseLargeFile streams 10 MiB through Parse in irregular small reads
// (so boundaries and buffers split everywhere) and checks the digest.
func TestParseLargeFile(t *testing.T) {
	data := pseudoRandom(10 << 20)
	s := newStore(t)
	body, ct := buildBody(t, text("content_type", "application/octet-stream"), text("file_path", "big.bin"), file(data))
	readers := map[string]io.Reader{
		"whole":      bytes.NewReader(body),
		"odd chunks": &chunkReader{data: body, sizes: []int{1, 7, 4095, 4097, 65536, 1 << 20, 3}},
	}
	for name, r := range readers {
		t.Run(name, func(t *testing.T) {
			req, err := Parse(context.Background(), r, ct, s, Limits{MaxBytes: 11 << 20})
			if err != nil {
				t.Fatal(err)
			}
			defer req.Upload.Abort()
			if want := blakeHash(data); req.Hash != want || req.Size != int64(len(data)) {
				t.Fatalf("got %s, %d; want %s, %d", req.Hash, req.Size, want, len(data))
			}
		})
	}
}

// chunkReader returns data in reads of cycling sizes.
type chunkReader struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.sizes[c.i%len(c.sizes)], len(c.data))
	c.i++
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// failingReader yields data, then err (a client that went away).
type failingReader struct {
	data  []byte
	err   error
	after func()
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		if f.after != nil {
			f.after()
		}
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

func TestParseClientFailures(t *testing.T) {
	data := pseudoRandom(4 << 20)
	body, ct := buildBody(t, text("content_type", "image/png"), text("file_path", "p.png"), file(data))
	tests := []struct {
		name    string
		cut     int
		readErr error
		cancel  bool
		wantIs  error
	}{
		{name: "cut mid-file", cut: len(body) / 2, readErr: io.ErrUnexpectedEOF, wantIs: io.ErrUnexpectedEOF},
		{name: "cut mid-metadata", cut: 120, readErr: io.ErrUnexpectedEOF, wantIs: io.ErrUnexpectedEOF},
		{name: "connection reset", cut: len(body) - 10, readErr: errors.New("read: connection reset by peer"), wantIs: nil},
		{name: "context canceled mid-file", cut: len(body) / 2, cancel: true, wantIs: context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			fr := &failingReader{data: body[:tt.cut], err: tt.readErr}
			if tt.cancel {
				// The request context ends while the body is still open
				// (reads return nothing, no error): Parse must stop anyway.
				fr.after = cancel
				fr.err = nil
			}
			req, err := Parse(ctx, fr, ct, s, Limits{})
			if err == nil {
				req.Upload.Abort()
				t.Fatal("Parse succeeded on a failed body")
			}
			if _, isAPI := apierr.As(err); isAPI {
				t.Fatalf("client failure mapped to an API error: %v", err)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Fatalf("error %v does not wrap %v", err, tt.wantIs)
			}
			if tt.wantIs == nil && !errors.Is(err, tt.readErr) {
				t.Fatalf("error %v does not wrap %v", err, tt.readErr)
			}
			assertNoLeftovers(t, s)
		})
	}
}

// TestParseOverHTTP drives Parse from a real server: http.MaxBytesReader
// yields 413 and a client that hangs up mid-body yields a read error, both
// leaving nothing behind.
func TestParseOverHTTP(t *testing.T) {
	s := newStore(t)
	type result struct{ err error }
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := http.MaxBytesReader(w, r.Body, 2<<20)
		req, err := Parse(r.Context(), body, r.Header.Get("Content-Type"), s, Limits{})
		if err == nil {
			_, err = req.Upload.Publish(nil)
		}
		results <- result{err}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()

	t.Run("MaxBytesReader", func(t *testing.T) {
		body, ct := buildBody(t, text("content_type", "image/png"), text("file_path", "p.png"), file(pseudoRandom(3<<20)))
		resp, err := http.Post(srv.URL, ct, bytes.NewReader(body))
		if err == nil {
			resp.Body.Close()
		}
		res := <-results
		ae, ok := apierr.As(res.err)
		if !ok || ae.Status != http.StatusRequestEntityTooLarge || ae.Code != "payload_too_large" {
			t.Fatalf("got %v, want 413 payload_too_large", res.err)
		}
		assertNoLeftovers(t, s)
	})

	t.Run("client hangs up", func(t *testing.T) {
		body, ct := buildBody(t, text("content_type", "image/png"), text("file_path", "p.png"), file(pseudoRandom(1<<20)))
		pr, pw := io.Pipe()
		go func() {
			_, _ = pw.Write(body[:len(body)/2])
			_ = pw.CloseWithError(errors.New("client gave up"))
		}()
		hreq, err := http.NewRequest(http.MethodPost, srv.URL, pr)
		if err != nil {
			t.Fatal(err)
		}
		hreq.ContentLength = int64(len(body))
		hreq.Header.Set("Content-Type", ct)
		if resp, err := http.DefaultClient.Do(hreq); err == nil {
			resp.Body.Close()
		}
		res := <-results
		if res.err == nil {
			t.Fatal("Parse succeeded on a truncated body")
		}
		if _, isAPI := apierr.As(res.err); isAPI {
			t.Fatalf("hang-up mapped to an API error: %v", res.err)
		}
		assertNoLeftovers(t, s)
	})
}

// TestParseDoesNotBufferFile checks that memory use stays flat: a 32 MiB file
// must not cause anywhere near 32 MiB of allocation, whether the metadata
// comes before or after it.
func TestParseDoesNotBufferFile(t *testing.T) {
	data := pseudoRandom(32 << 20)
	ct, fp := text("content_type", "image/png"), text("file_path", "p.png")
	for name, fields := range map[string][]field{
		"metadata first": {ct, fp, file(data)},
		"file first":     {file(data), ct, fp},
	} {
		t.Run(name, func(t *testing.T) {
			s := newStore(t)
			body, header := buildBody(t, fields...)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			req, err := Parse(context.Background(), bytes.NewReader(body), header, s, Limits{})
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			defer req.Upload.Abort()
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Fatalf("Parse allocated %d bytes for a 32 MiB file", alloc)
			}
		})
	}
}
