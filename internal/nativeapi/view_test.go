package nativeapi

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// TestParseViewRef: /view's parameters as ComfyUI reads them, and the
// paths it refuses.
func TestParseViewRef(t *testing.T) {
	tests := []struct {
		filename, subfolder, typ string
		path, wantType           string
		status                   int
	}{
		{"a.png", "", "", "a.png", "output", 0},
		{"a.png", "job/sub", "output", "job/sub/a.png", "output", 0},
		{"a.png [input]", "", "output", "a.png", "input", 0},
		{"a.png [temp]", "x", "", "x/a.png", "temp", 0},
		{"../a.png", "", "", "", "", 400},
		{"/etc/passwd", "", "", "", "", 400},
		{"", "", "", "", "", 400},
		{"a.png", "../../etc", "", "", "", 403},
		{"a.png", "/abs", "", "", "", 403},
	}
	for _, tc := range tests {
		ref, err := ParseViewRef(tc.filename, tc.subfolder, tc.typ)
		if tc.status != 0 {
			e, ok := apierr.As(err)
			if !ok || e.Status != tc.status {
				t.Errorf("ParseViewRef(%q, %q) = %v, want status %d", tc.filename, tc.subfolder, err, tc.status)
			}
			continue
		}
		if err != nil || ref.FilePath != tc.path || ref.Type != tc.wantType {
			t.Errorf("ParseViewRef(%q, %q, %q) = %+v, %v; want %s %s", tc.filename, tc.subfolder, tc.typ, ref, err, tc.path, tc.wantType)
		}
	}
}

func encode(t *testing.T, img image.Image) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestComposite: the mask's alpha replaces the original's, colours kept.
func TestComposite(t *testing.T) {
	orig := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	mask := image.NewNRGBA(image.Rect(0, 0, 3, 2))
	for y := 0; y < 2; y++ {
		for x := 0; x < 3; x++ {
			orig.SetNRGBA(x, y, color.NRGBA{uint8(10 * x), uint8(20 * y), 99, 255})
			mask.SetNRGBA(x, y, color.NRGBA{0, 0, 0, uint8(40*x + 100*y)})
		}
	}
	var out bytes.Buffer
	if err := Composite(&out, bytes.NewReader(encode(t, orig)), bytes.NewReader(encode(t, mask))); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&out)
	if err != nil {
		t.Fatal(err)
	}
	for y := 0; y < 2; y++ {
		for x := 0; x < 3; x++ {
			got := color.NRGBAModel.Convert(img.At(x, y)).(color.NRGBA)
			want := color.NRGBA{uint8(10 * x), uint8(20 * y), 99, uint8(40*x + 100*y)}
			if got != want {
				t.Errorf("pixel %d,%d = %v, want %v", x, y, got, want)
			}
		}
	}
	small := image.NewNRGBA(image.Rect(0, 0, 1, 1))
	err = Composite(&out, bytes.NewReader(encode(t, orig)), bytes.NewReader(encode(t, small)))
	if e, ok := apierr.As(err); !ok || e.Status != 422 {
		t.Errorf("a mask of another size: %v", err)
	}
	err = Composite(&out, bytes.NewReader([]byte("not an image")), bytes.NewReader(encode(t, small)))
	if _, ok := apierr.As(err); !ok {
		t.Errorf("an original that is no image: %v", err)
	}
}
