package ingest

import (
	"bytes"
	"context"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// s3PartSize is S3's smallest part: a file of streamedSize takes the S3
// store's multipart path (several parts, several buffers).
const (
	s3PartSize   = 5 << 20
	streamedSize = 2*s3PartSize + 1
)

// storeUnderTest is a blob store and a view of everything in it.
type storeUnderTest struct {
	store blob.Store
	// contents lists the published objects and, apart, anything else the
	// store holds: temp files, temp objects, incomplete multipart uploads
	// (also those at a content address, which an expected_hash starts).
	contents func(t *testing.T) (objects, pending []string)
}

// stores returns the stores Parse is tested on: the file system and a
// bucket of the test S3 server (tests/s3-server).
func stores() []struct {
	name string
	open func(t *testing.T) storeUnderTest
} {
	return []struct {
		name string
		open func(t *testing.T) storeUnderTest
	}{
		{"file_system", func(t *testing.T) storeUnderTest {
			s := newStore(t)
			return storeUnderTest{store: s, contents: func(t *testing.T) ([]string, []string) {
				return filesUnder(t, filepath.Join(s.Dir(), "objects")), filesUnder(t, filepath.Join(s.Dir(), "tmp"))
			}}
		}},
		{"s3", func(t *testing.T) storeUnderTest {
			cfg := s3test.Bucket(t)
			s, err := s3blob.New(s3blob.Config{
				Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region, Prefix: "gw/",
				AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, PathStyle: true, PartSize: s3PartSize,
			})
			if err != nil {
				t.Fatal(err)
			}
			return storeUnderTest{store: s, contents: func(t *testing.T) (objects, pending []string) {
				for _, k := range cfg.Keys(t, "") {
					if (strings.HasPrefix(k, "gw/objects/") || strings.HasPrefix(k, "gw/blobs/")) && !strings.Contains(k, "?uploadId=") {
						objects = append(objects, k)
					} else {
						pending = append(pending, k)
					}
				}
				return objects, pending
			}}
		}},
	}
}

// permutations returns every order of fs.
func permutations(fs []field) [][]field {
	if len(fs) <= 1 {
		return [][]field{slices.Clone(fs)}
	}
	var out [][]field
	for i := range fs {
		rest := append(slices.Clone(fs[:i]), fs[i+1:]...)
		for _, p := range permutations(rest) {
			out = append(out, append([]field{fs[i]}, p...))
		}
	}
	return out
}

func hasPart(fs []field, name string) bool {
	return slices.ContainsFunc(fs, func(f field) bool { return f.name == name })
}

func partNames(fs []field) string {
	names := make([]string, len(fs))
	for i, f := range fs {
		names[i] = f.name
	}
	return strings.Join(names, ",")
}

// TestParseAnyOrder: the contract sets no order on the parts. Every order
// of content_type, file_path, expected_hash and the file is accepted, on
// both stores, and yields the same upload; so do bodies that put every
// optional part after the file, including a file large enough to stream in
// several parts.
func TestParseAnyOrder(t *testing.T) {
	small := []byte("\x89PNG bytes sent in any order")
	streamed := pseudoRandom(streamedSize)
	type orderCase struct {
		name   string
		fields []field
		data   []byte
		want   Request
	}
	var cases []orderCase
	for _, order := range permutations([]field{
		text("content_type", "image/png"), text("file_path", "in/any/order.png"),
		text("expected_hash", blakeHash(small)), file(small),
	}) {
		cases = append(cases, orderCase{name: partNames(order), fields: order, data: small,
			want: Request{ContentType: "image/png", FilePath: "in/any/order.png"}})
	}
	for _, order := range permutations([]field{text("content_type", "image/png"), text("file_path", "no-hash.png"), file(small)}) {
		cases = append(cases, orderCase{name: partNames(order), fields: order, data: small,
			want: Request{ContentType: "image/png", FilePath: "no-hash.png"}})
	}
	everyPartAfter := func(data []byte) []field {
		return []field{file(data), text("tags", "a"), text("expires_in", "3600"), text("file_path", "late.bin"),
			text("tags", `["b"]`), text("content_type", "application/octet-stream"), text("expected_hash", blakeHash(data))}
	}
	lateWant := Request{ContentType: "application/octet-stream", FilePath: "late.bin", Tags: []string{"a", "b"}, ExpiresIn: 3600}
	cases = append(cases,
		orderCase{name: "every optional part after the file", fields: everyPartAfter(small), data: small, want: lateWant},
		orderCase{name: "streamed file first, every part after it", fields: everyPartAfter(streamed), data: streamed, want: lateWant},
		orderCase{name: "streamed file after expected_hash, metadata after it", data: streamed,
			fields: []field{text("expected_hash", blakeHash(streamed)), file(streamed), text("file_path", "x.bin"), text("content_type", "image/png")},
			want:   Request{ContentType: "image/png", FilePath: "x.bin"}},
	)
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := st.open(t)
					body, ct := buildBody(t, c.fields...)
					req, err := Parse(context.Background(), bytes.NewReader(body), ct, s.store, Limits{MaxBytes: int64(len(body))})
					if err != nil {
						t.Fatalf("Parse: %v", err)
					}
					defer req.Upload.Abort()
					want := c.want
					if hasPart(c.fields, "expected_hash") {
						want.ExpectedHash = blakeHash(c.data)
					}
					if req.Hash != blakeHash(c.data) || req.Size != int64(len(c.data)) {
						t.Fatalf("hash, size = %s, %d; want %s, %d", req.Hash, req.Size, blakeHash(c.data), len(c.data))
					}
					if req.ContentType != want.ContentType || req.FilePath != want.FilePath || req.ExpectedHash != want.ExpectedHash ||
						req.ExpiresIn != want.ExpiresIn || strings.Join(req.Tags, "|") != strings.Join(want.Tags, "|") {
						t.Fatalf("got %+v\nwant %+v", *req, want)
					}
					obj, err := req.Upload.Publish(nil)
					if err != nil {
						t.Fatalf("Publish: %v", err)
					}
					if err := req.Upload.Abort(); err != nil {
						t.Fatalf("Abort after Publish: %v", err)
					}
					f, _, err := s.store.Open(context.Background(), obj, 0)
					if err != nil {
						t.Fatalf("Open: %v", err)
					}
					got, err := io.ReadAll(f)
					f.Close()
					if err != nil || !bytes.Equal(got, c.data) {
						t.Fatalf("stored %d bytes (%v), want the %d uploaded", len(got), err, len(c.data))
					}
					if objects, pending := s.contents(t); len(objects) != 1 || len(pending) != 0 {
						t.Fatalf("store holds objects %v and pending %v; want one object", objects, pending)
					}
				})
			}
		})
	}
}

// rejectCase is a refused body and the envelope it must get.
type rejectCase struct {
	name   string
	fields []field
	limit  int64 // -1: half the body
	status int
	code   string
	msg    string // checked when set
}

// refusalsInAnyOrder returns, for data, every body missing a required part
// (in every order of the parts it has) and every body with one invalid part
// sent before and after the file.
func refusalsInAnyOrder(data []byte) []rejectCase {
	ct, fp, f := text("content_type", "image/png"), text("file_path", "p.png"), file(data)
	var out []rejectCase
	for _, m := range []struct {
		have []field
		msg  string
	}{
		{[]field{fp, f}, "content_type is required"},
		{[]field{ct, f}, "file_path is required"},
		{[]field{ct, fp}, "the file part is required"},
		{[]field{f}, "content_type is required"},
		{[]field{ct}, "file_path is required"},
		{[]field{fp}, "content_type is required"},
		{[]field{f, text("tags", "t"), text("expected_hash", blakeHash(data))}, "content_type is required"},
	} {
		for _, order := range permutations(m.have) {
			out = append(out, rejectCase{name: "missing part: " + partNames(order), fields: order, status: 422, code: "invalid_request", msg: m.msg})
		}
	}
	for _, bad := range []struct {
		label    string
		field    field
		replaces bool // it stands for the good part of its name; otherwise it is one more part
		status   int
		code     string
	}{
		{"content_type unparsable", text("content_type", "image/png; =x"), true, 422, "invalid_request"},
		{"content_type empty", text("content_type", ""), true, 422, "invalid_request"},
		{"file_path absolute", text("file_path", "/etc/passwd"), true, 422, "invalid_request"},
		{"file_path escaping", text("file_path", "a/../../b.png"), true, 422, "invalid_request"},
		{"file_path empty", text("file_path", ""), true, 422, "invalid_request"},
		{"expected_hash malformed", text("expected_hash", "blake3:abc"), false, 422, "invalid_request"},
		{"expected_hash mismatch", text("expected_hash", blakeHash(append([]byte("other"), data...))), false, 409, "hash_mismatch"},
		{"expires_in too small", text("expires_in", "59"), false, 422, "invalid_request"},
		{"tags with an empty tag", text("tags", `["a",""]`), false, 422, "invalid_request"},
		{"unknown part", text("colour", "red"), false, 422, "invalid_request"},
		{"second content_type", ct, false, 422, "invalid_request"},
		{"second file_path", fp, false, 422, "invalid_request"},
		{"second file", f, false, 422, "invalid_request"},
	} {
		good := []field{f, ct, fp}
		if bad.replaces {
			good = slices.DeleteFunc(good, func(g field) bool { return g.name == bad.field.name })
		}
		name := bad.label
		out = append(out,
			rejectCase{name: "after the file: " + name, fields: append(slices.Clone(good), bad.field), status: bad.status, code: bad.code},
			rejectCase{name: "before the file: " + name, fields: append([]field{bad.field}, good...), status: bad.status, code: bad.code})
	}
	out = append(out, rejectCase{name: "after the file: over the limit in the file", fields: []field{f, ct, fp}, limit: -1, status: 413, code: "payload_too_large"})
	return out
}

// TestParseRejectsAnyOrder: a body missing a required part, or with an
// invalid one, is refused wherever the file part is, on both stores; when
// the file came first its bytes were stored on their way in, and the
// refusal leaves no object, no temp file or object and no incomplete
// multipart upload. A streamed file (several S3 parts) is refused the same.
func TestParseRejectsAnyOrder(t *testing.T) {
	small := []byte("bytes of a refused upload")
	streamed := pseudoRandom(streamedSize)
	cases := refusalsInAnyOrder(small)
	for _, c := range refusalsInAnyOrder(streamed) {
		if strings.HasPrefix(c.name, "after the file") || strings.HasPrefix(c.name, "missing part: file,") {
			c.name = "streamed, " + c.name
			cases = append(cases, c)
		}
	}
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					s := st.open(t)
					body, ct := buildBody(t, c.fields...)
					limit := c.limit
					if limit == -1 {
						limit = int64(len(body)) / 2
					}
					req, err := Parse(context.Background(), bytes.NewReader(body), ct, s.store, Limits{MaxBytes: limit})
					if err == nil {
						req.Upload.Abort()
						t.Fatalf("Parse accepted %s", partNames(c.fields))
					}
					ae, ok := apierr.As(err)
					if !ok || ae.Status != c.status || ae.Code != c.code {
						t.Fatalf("got %v; want %d %s", err, c.status, c.code)
					}
					if c.msg != "" && ae.Message != c.msg {
						t.Fatalf("message %q, want %q", ae.Message, c.msg)
					}
					if objects, pending := s.contents(t); len(objects) != 0 || len(pending) != 0 {
						t.Fatalf("the refusal left objects %v and pending %v", objects, pending)
					}
				})
			}
		})
	}
}

// TestParseRefusalKeepsStoredBytes: a refused upload of bytes the store
// already holds (streamed before its metadata, or toward their address
// after an expected_hash) removes its own staging, never the stored object.
func TestParseRefusalKeepsStoredBytes(t *testing.T) {
	for _, st := range stores() {
		t.Run(st.name, func(t *testing.T) {
			for _, data := range [][]byte{[]byte("stored already"), pseudoRandom(streamedSize)} {
				s := st.open(t)
				body, ct := buildBody(t, text("content_type", "image/png"), text("file_path", "kept.png"), file(data))
				req, err := Parse(context.Background(), bytes.NewReader(body), ct, s.store, Limits{})
				if err != nil {
					t.Fatal(err)
				}
				stored, err := req.Upload.Publish(nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Upload.Abort()
				for _, fields := range [][]field{
					{file(data), text("content_type", "image/png"), text("file_path", "/absolute.png")},
					{text("expected_hash", blakeHash(data)), file(data), text("file_path", "p.png")},
					{file(data), text("file_path", "p.png"), text("content_type", "image/png"), text("expires_in", "1")},
				} {
					body, ct := buildBody(t, fields...)
					if req, err := Parse(context.Background(), bytes.NewReader(body), ct, s.store, Limits{}); err == nil {
						req.Upload.Abort()
						t.Fatalf("%s: accepted", partNames(fields))
					}
					objects, pending := s.contents(t)
					if len(objects) != 1 || len(pending) != 0 {
						t.Fatalf("%s: store holds objects %v and pending %v; want the stored object only", partNames(fields), objects, pending)
					}
					if n, err := s.store.Stat(context.Background(), stored); err != nil || n != int64(len(data)) {
						t.Fatalf("%s: the stored object: %d, %v", partNames(fields), n, err)
					}
				}
			}
		})
	}
}
