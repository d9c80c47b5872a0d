package nativeapi

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/embedded"
)

// uploadService is a Service with a real embedded store and blob directory
// (uploads need nothing else).
func uploadService(t *testing.T) *Service {
	t.Helper()
	st, err := embedded.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	blobs := blob.NewFileSystem(filepath.Join(t.TempDir(), "blobs"))
	if err := blobs.Init(); err != nil {
		t.Fatal(err)
	}
	return &Service{Assets: &assets.Service{Store: st, Blobs: blobs, MaxUploadBytes: 1 << 20}, Native: st}
}

// form builds a multipart body: fields in order, the file where "image" is.
func form(t *testing.T, fields [][2]string, filename string, data []byte) (io.Reader, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, f := range fields {
		if f[0] == "image" {
			fw, _ := w.CreateFormFile("image", filename)
			fw.Write(data)
			continue
		}
		w.WriteField(f[0], f[1])
	}
	w.Close()
	return &buf, w.FormDataContentType()
}

// TestUploadNames: ComfyUI's naming over comfygate's assets — the same
// bytes under a name are one asset; other bytes under a used name are
// renamed unless overwrite; subfolders keep names apart; accounts too.
func TestUploadNames(t *testing.T) {
	s := uploadService(t)
	ctx := context.Background()
	up := func(account, name string, data []byte, fields ...[2]string) FileRef {
		t.Helper()
		body, ct := form(t, append([][2]string{{"image"}}, fields...), name, data)
		ref, err := s.Upload(ctx, account, body, ct, false)
		if err != nil {
			t.Fatalf("upload %s: %v", name, err)
		}
		return ref
	}
	steps := []struct {
		account, name string
		data          string
		fields        [][2]string
		want          FileRef
	}{
		{"a", "x.png", "one", nil, FileRef{"x.png", "", "input"}},
		{"a", "x.png", "one", nil, FileRef{"x.png", "", "input"}},                                 // same bytes: same file
		{"a", "x.png", "two", nil, FileRef{"x (1).png", "", "input"}},                             // renamed
		{"a", "x.png", "three", nil, FileRef{"x (2).png", "", "input"}},                           // next free name
		{"a", "x.png", "two", nil, FileRef{"x (1).png", "", "input"}},                             // found under its rename
		{"a", "x.png", "four", [][2]string{{"overwrite", "true"}}, FileRef{"x.png", "", "input"}}, // replaced
		{"a", "x.png", "five", [][2]string{{"subfolder", "masks/"}}, FileRef{"x.png", "masks", "input"}},
		{"b", "x.png", "two", nil, FileRef{"x.png", "", "input"}}, // b's names are b's
		{"a", "y.png", "one", [][2]string{{"type", "temp"}}, FileRef{"y.png", "", "temp"}},
		{"a", "../../dir/z.png", "six", nil, FileRef{"z.png", "", "input"}}, // a path in the file name is dropped
	}
	for i, st := range steps {
		if got := up(st.account, st.name, []byte(st.data), st.fields...); got != st.want {
			t.Fatalf("step %d: got %+v, want %+v", i, got, st.want)
		}
	}
	// What each name holds now, for its account.
	for _, c := range []struct{ account, path, data string }{
		{"a", "x.png", "four"}, {"a", "x (1).png", "two"}, {"a", "x (2).png", "three"}, {"a", "masks/x.png", "five"}, {"b", "x.png", "two"},
	} {
		_, f, err := s.Open(ctx, c.account, ViewRef{FilePath: c.path})
		if err != nil {
			t.Fatalf("open %s/%s: %v", c.account, c.path, err)
		}
		b, _ := io.ReadAll(f)
		f.Close()
		if string(b) != c.data {
			t.Errorf("%s's %s = %q, want %q", c.account, c.path, b, c.data)
		}
	}
	if _, _, err := s.Open(ctx, "b", ViewRef{FilePath: "x (1).png"}); err == nil {
		t.Error("b opened a's file")
	}
}

// TestUploadRefusals: bodies ComfyUI answers 400, and what comfygate adds.
func TestUploadRefusals(t *testing.T) {
	s := uploadService(t)
	tests := []struct {
		name     string
		fields   [][2]string
		filename string
		ct       string
		status   int
	}{
		{"no image part", [][2]string{{"subfolder", "x"}}, "", "", 400},
		{"a subfolder out of the folder", [][2]string{{"image"}, {"subfolder", "../../etc"}}, "x.png", "", 400},
		{"an unknown type", [][2]string{{"image"}, {"type", "models"}}, "x.png", "", 400},
		{"not multipart", [][2]string{{"image"}}, "x.png", "application/json", 400},
		{"a mask without original_ref", [][2]string{{"image"}}, "m.png", "mask", 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			body, ct := form(t, tc.fields, tc.filename, []byte("data"))
			mask := tc.ct == "mask"
			if tc.ct != "" && !mask {
				ct = tc.ct
			}
			_, err := s.Upload(context.Background(), "a", body, ct, mask)
			if e, ok := apierr.As(err); !ok || e.Status != tc.status {
				t.Fatalf("got %v, want status %d", err, tc.status)
			}
		})
	}
	// Nothing was stored by any refusal.
	if _, _, err := s.Open(context.Background(), "a", ViewRef{FilePath: "x.png"}); err == nil {
		t.Error("a refused upload left a file")
	}
}

// TestUploadMask: /upload/mask stores the original with the mask's alpha.
func TestUploadMask(t *testing.T) {
	s := uploadService(t)
	ctx := context.Background()
	orig := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	mask := image.NewNRGBA(image.Rect(0, 0, 2, 2))
	for i := range 4 {
		orig.SetNRGBA(i%2, i/2, color.NRGBA{uint8(50 * i), 7, 9, 255})
		mask.SetNRGBA(i%2, i/2, color.NRGBA{0, 0, 0, uint8(60 * i)})
	}
	var ob, mb bytes.Buffer
	png.Encode(&ob, orig)
	png.Encode(&mb, mask)
	body, ct := form(t, [][2]string{{"image"}}, "photo.png", ob.Bytes())
	if _, err := s.Upload(ctx, "a", body, ct, false); err != nil {
		t.Fatal(err)
	}
	body, ct = form(t, [][2]string{{"image"}, {"original_ref", `{"filename":"photo.png","subfolder":"","type":"input"}`}}, "clipspace-mask.png", mb.Bytes())
	ref, err := s.Upload(ctx, "a", body, ct, true)
	if err != nil || ref.Filename != "clipspace-mask.png" {
		t.Fatalf("mask upload: %+v %v", ref, err)
	}
	a, f, err := s.Open(ctx, "a", ViewRef{FilePath: "clipspace-mask.png"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil || a.ContentType != "image/png" {
		t.Fatalf("%v %s", err, a.ContentType)
	}
	for i := range 4 {
		got := color.NRGBAModel.Convert(img.At(i%2, i/2)).(color.NRGBA)
		if want := (color.NRGBA{uint8(50 * i), 7, 9, uint8(60 * i)}); got != want {
			t.Errorf("pixel %d = %v, want %v", i, got, want)
		}
	}
	// The original of another account is not found.
	body, ct = form(t, [][2]string{{"image"}, {"original_ref", `{"filename":"photo.png"}`}}, "m.png", mb.Bytes())
	if _, err := s.Upload(ctx, "b", body, ct, true); err == nil {
		t.Error("b masked a's image")
	} else if e, _ := apierr.As(err); e == nil || e.Status != http.StatusNotFound {
		t.Errorf("b's mask over a's image: %v", err)
	}
}
