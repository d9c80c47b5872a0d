package nativeapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"io/fs"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/s3test"
)

// s3PartSize is S3's smallest part; an image of streamedSize is sent to
// the S3 store in several parts before the form's last fields arrive.
const (
	s3PartSize   = 5 << 20
	streamedSize = 2*s3PartSize + 1
)

// blobStores returns a file-system store and a store on a bucket of the
// test S3 server (tests/s3-server), each with a listing of everything it
// holds: objects, temp files and objects, incomplete multipart uploads.
func blobStores() map[string]func(t *testing.T) (blob.Store, func(t *testing.T) []string) {
	return map[string]func(t *testing.T) (blob.Store, func(t *testing.T) []string){
		"file_system": func(t *testing.T) (blob.Store, func(t *testing.T) []string) {
			dir := filepath.Join(t.TempDir(), "blobs")
			s := blob.NewFileSystem(dir)
			if err := s.Init(); err != nil {
				t.Fatal(err)
			}
			return s, func(t *testing.T) []string {
				var files []string
				_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() {
						files = append(files, p)
					}
					return nil
				})
				return files
			}
		},
		"s3": func(t *testing.T) (blob.Store, func(t *testing.T) []string) {
			cfg := s3test.Bucket(t)
			s, err := s3blob.New(s3blob.Config{
				Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region,
				AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, PathStyle: true, PartSize: s3PartSize,
			})
			if err != nil {
				t.Fatal(err)
			}
			return s, func(t *testing.T) []string { return cfg.Keys(t, "") }
		},
	}
}

func uploadServiceOn(t *testing.T, blobs blob.Store) *Service {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return &Service{Assets: &assets.Service{Store: st, Blobs: blobs, MaxUploadBytes: 32 << 20}, Native: st}
}

// TestUploadImageAnyOrder: ComfyUI's /upload/image takes its fields in any
// order, and so does comfygate's, which streams the image into the blob
// store as it arrives: the image before, between or after the fields is
// the same file; a form refused for a field sent after the image (or for a
// body cut after it) leaves nothing in the store, on the file system and
// on S3, with an image small enough to stay in memory and one streamed in
// several parts.
func TestUploadImageAnyOrder(t *testing.T) {
	for name, open := range blobStores() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, size := range []int{1000, streamedSize} {
				data := make([]byte, size)
				rand.Read(data)
				blobs, contents := open(t)
				s := uploadServiceOn(t, blobs)
				fields := [][2]string{{"subfolder", "in"}, {"type", "input"}, {"overwrite", "true"}}
				for at := 0; at <= len(fields); at++ {
					order := append(append(append([][2]string{}, fields[:at]...), [2]string{"image"}), fields[at:]...)
					body, ct := form(t, order, "x.png", data)
					ref, err := s.Upload(context.Background(), "a", body, ct, false)
					if err != nil || ref != (FileRef{"x.png", "in", "input"}) {
						t.Fatalf("%d bytes, image at %d: %+v, %v", size, at, ref, err)
					}
					_, f, err := s.Open(context.Background(), "a", ViewRef{FilePath: "in/x.png"})
					if err != nil {
						t.Fatal(err)
					}
					got, _ := io.ReadAll(f)
					f.Close()
					if !bytes.Equal(got, data) {
						t.Fatalf("%d bytes, image at %d: stored %d bytes", size, at, len(got))
					}
				}
				stored := contents(t)
				if len(stored) != 1 {
					t.Fatalf("%d bytes: the store holds %v; want the one object", size, stored)
				}

				other := append([]byte("other "), data...)
				for _, c := range []struct {
					name   string
					fields [][2]string
					cut    int // bytes cut off the end of the body
					status int
				}{
					{"type after the image", [][2]string{{"image"}, {"type", "models"}}, 0, 400},
					{"subfolder after the image", [][2]string{{"image"}, {"subfolder", "../../etc"}}, 0, 400},
					{"over-long field after the image", [][2]string{{"image"}, {"subfolder", strings.Repeat("s", ingest.MaxFieldBytes+1)}}, 0, 400},
					{"original_ref after the image", [][2]string{{"image"}, {"original_ref", "{}"}}, 0, 400},
					{"second image", [][2]string{{"image"}, {"image"}}, 0, 400},
					{"body cut after the image", [][2]string{{"image"}, {"type", "input"}}, 30, 400},
					{"over the limit", [][2]string{{"image"}, {"type", "input"}}, 0, 413},
				} {
					body, ct := form(t, c.fields, "y.png", other)
					raw, _ := io.ReadAll(body)
					var r io.Reader = bytes.NewReader(raw[:len(raw)-c.cut])
					if c.status == 413 {
						r = http.MaxBytesReader(nil, io.NopCloser(r), int64(len(raw)-100))
					}
					_, err := s.Upload(context.Background(), "a", r, ct, false)
					if e, ok := apierr.As(err); !ok || e.Status != c.status {
						t.Fatalf("%d bytes, %s: got %v, want %d", size, c.name, err, c.status)
					}
					if now := contents(t); len(now) != 1 || now[0] != stored[0] {
						t.Fatalf("%d bytes, %s: the store holds %v; want %v", size, c.name, now, stored)
					}
				}
			}
		})
	}
}
