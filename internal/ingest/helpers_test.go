package ingest

import (
	"bytes"
	"fmt"
	"io/fs"
	"mime/multipart"
	"net/textproto"
	"os"
	"path/filepath"
	"testing"

	"github.com/comfygate/comfygate/storage/blob"
)

// field is one multipart part of a test body.
type field struct {
	name     string
	filename string // set for file-style parts
	value    []byte
}

func text(name, value string) field { return field{name: name, value: []byte(value)} }

func file(data []byte) field { return field{name: "file", filename: "upload.bin", value: data} }

// buildBody encodes fields, in order, as multipart/form-data.
func buildBody(t testing.TB, fields ...field) (body []byte, contentType string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		h := textproto.MIMEHeader{}
		if f.filename != "" {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, f.name, f.filename))
			h.Set("Content-Type", "application/octet-stream")
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, f.name))
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pw.Write(f.value); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// newStore returns an initialised blob store in a fresh temp dir.
func newStore(t testing.TB) *blob.FileSystem {
	t.Helper()
	s := blob.NewFileSystem(t.TempDir())
	if err := s.Init(); err != nil {
		t.Fatal(err)
	}
	return s
}

// filesUnder lists regular files below dir.
func filesUnder(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, p)
		}
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	return out
}

// assertNoLeftovers fails if the store holds any temp file or object.
func assertNoLeftovers(t testing.TB, s *blob.FileSystem) {
	t.Helper()
	if f := filesUnder(t, filepath.Join(s.Dir(), "tmp")); len(f) != 0 {
		t.Fatalf("temp files left: %v", f)
	}
	if f := filesUnder(t, filepath.Join(s.Dir(), "objects")); len(f) != 0 {
		t.Fatalf("objects published: %v", f)
	}
}
