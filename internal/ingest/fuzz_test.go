package ingest

import (
	"bytes"
	"context"
	"mime/multipart"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr/apierrtest"
)

// fuzzBoundary is the boundary the seeds use; the fuzzer may still break
// the framing any way it likes, or send another Content-Type.
const fuzzBoundary = "fuzzboundary"

// fuzzLimit is small so that the fuzzer reaches the 413 path.
const fuzzLimit = 64 << 10

func FuzzParse(f *testing.F) {
	seed := func(fields ...field) {
		var buf bytes.Buffer
		w := multipart.NewWriter(&buf)
		if err := w.SetBoundary(fuzzBoundary); err != nil {
			f.Fatal(err)
		}
		for _, fl := range fields {
			var pw interface{ Write([]byte) (int, error) }
			var err error
			if fl.filename != "" {
				pw, err = w.CreateFormFile(fl.name, fl.filename)
			} else {
				pw, err = w.CreateFormField(fl.name)
			}
			if err != nil {
				f.Fatal(err)
			}
			_, _ = pw.Write(fl.value)
		}
		_ = w.Close()
		f.Add(buf.Bytes(), w.FormDataContentType())
	}
	seed(text("content_type", "image/png"), text("file_path", "a/b.png"), file([]byte("png")))
	seed(file([]byte("x")), text("file_path", "x"), text("content_type", "text/plain; charset=utf-8"),
		text("tags", `["a","b"]`), text("tags", "c"), text("expires_in", "60"))
	seed(text("expected_hash", "blake3:"+strings.Repeat("0", 64)), text("content_type", "a/b"),
		text("file_path", "y"), file(nil))
	seed(text("file_path", `a\..\b`), text("content_type", "a/b"), file([]byte("z")))
	seed(text("file_path", "./C:/x"), text("content_type", "a/b"), file([]byte("z")))
	seed(text("unknown", "v"))
	seed(file(bytes.Repeat([]byte("A"), fuzzLimit+1)))
	f.Add([]byte("--fuzzboundary\r\n\r\n--fuzzboundary--"), "multipart/form-data; boundary=fuzzboundary")
	f.Add([]byte(""), "text/plain")

	store := newStore(f)
	f.Fuzz(func(t *testing.T, body []byte, contentType string) {
		req, err := Parse(context.Background(), bytes.NewReader(body), contentType, store, Limits{MaxBytes: fuzzLimit})
		if err != nil {
			apierrtest.ClientError(t, body, err)
			if left, lerr := store.Leftovers(context.Background()); lerr != nil || len(left) != 0 {
				t.Fatalf("refused body left temp files %v (%v)", left, lerr)
			}
			return
		}
		defer func() { _ = req.Upload.Abort() }()
		if req.Size > int64(len(body)) || req.Size > fuzzLimit {
			t.Fatalf("stored %d bytes from a %d-byte body (limit %d)", req.Size, len(body), fuzzLimit)
		}
		if again, err := CleanFilePath(req.FilePath); err != nil || again != req.FilePath {
			t.Fatalf("accepted file_path %q does not re-validate to itself: %q, %v", req.FilePath, again, err)
		}
		if len(req.Tags) > MaxTags {
			t.Fatalf("%d tags accepted; the bound is %d", len(req.Tags), MaxTags)
		}
		if req.ExpiresIn != 0 && (req.ExpiresIn < MinExpiresIn || req.ExpiresIn > MaxExpiresIn) {
			t.Fatalf("expires_in %d is out of bounds", req.ExpiresIn)
		}
		if req.ExpectedHash != "" && req.ExpectedHash != req.Hash {
			t.Fatalf("expected_hash %s accepted for bytes hashing to %s", req.ExpectedHash, req.Hash)
		}
		if again, err := parseContentType(req.ContentType); err != nil || again != req.ContentType {
			t.Fatalf("normalised content_type %q does not round-trip: %q, %v", req.ContentType, again, err)
		}
	})
}

// FuzzCleanFilePath checks the placement-path rule against what a worker
// does with the result: join it to a root, on POSIX or on Windows.
func FuzzCleanFilePath(f *testing.F) {
	for _, s := range []string{"a/b.png", "a//b", "./a/b", "..", "a/../b", `a\..\b`, `\\srv\share`, "C:x",
		"./C:/x", `./\\srv\share`, "a/.", ".", "a/", "é/ü", "a\x00b", "...", ".. /x", "a/. ./b", "c:/windows"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, err := CleanFilePath(v)
		if err != nil {
			apierrtest.ClientError(t, v, err)
			return
		}
		if again, err := CleanFilePath(got); err != nil || again != got {
			t.Fatalf("CleanFilePath(%q) = %q, which re-validates to %q, %v", v, got, again, err)
		}
		if got == "" || len(got) > MaxFilePathBytes {
			t.Fatalf("CleanFilePath(%q) = %q: empty or too long", v, got)
		}
		if escapesRoot(got) {
			t.Fatalf("CleanFilePath(%q) = %q, which escapes a root on POSIX or Windows", v, got)
		}
	})
}

// escapesRoot reports whether a worker joining p to a directory could end up
// outside it: an absolute or drive-qualified path, or a parent segment,
// where Windows also splits on backslashes and ignores the trailing dots and
// spaces of a segment ("..." and ".. " name the parent there).
func escapesRoot(p string) bool {
	if p[0] == '/' || p[0] == '\\' || len(p) >= 2 && p[1] == ':' && isASCIILetter(p[0]) {
		return true
	}
	for _, seg := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == '\\' }) {
		if strings.TrimRight(seg, ". ") == "" && strings.Contains(seg, "..") {
			return true
		}
	}
	return false
}

// TestCleanFilePathFuzzFindings holds what FuzzCleanFilePath found: a
// leading "./" hid a drive letter or a UNC prefix from the checks that ran
// before cleaning, and Windows reads "..." and ".. " as the parent.
func TestCleanFilePathFuzzFindings(t *testing.T) {
	for _, v := range []string{"./C:/x", `./\\srv\share\x`, ".//c:x", "...", ".. /x", `a\... \b`, "a/. ./..", `0\/.`} {
		if got, err := CleanFilePath(v); err == nil {
			t.Errorf("CleanFilePath(%q) = %q; want a refusal", v, got)
		} else {
			apierrtest.ClientError(t, v, err)
		}
	}
	for v, want := range map[string]string{"./a/b": "a/b", "a/.b": "a/.b", "a/b..c": "a/b..c", "a/.../b.png": ""} {
		got, err := CleanFilePath(v)
		if want == "" {
			if err == nil {
				t.Errorf("CleanFilePath(%q) = %q; want a refusal", v, got)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("CleanFilePath(%q) = %q, %v; want %q", v, got, err, want)
		}
	}
}
