package nativeapi

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/png"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/tests/bombs"
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
	if err := Composite(context.Background(), &out, bytes.NewReader(encode(t, orig)), bytes.NewReader(encode(t, mask))); err != nil {
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
	err = Composite(context.Background(), &out, bytes.NewReader(encode(t, orig)), bytes.NewReader(encode(t, small)))
	if e, ok := apierr.As(err); !ok || e.Status != 422 {
		t.Errorf("a mask of another size: %v", err)
	}
	err = Composite(context.Background(), &out, bytes.NewReader([]byte("not an image")), bytes.NewReader(encode(t, small)))
	if _, ok := apierr.As(err); !ok {
		t.Errorf("an original that is no image: %v", err)
	}
}

// TestCompositeRefusesBombs is the regression test of the mask upload that
// took a gateway from 64 MiB to 921 MiB: a 30000×30000 gray PNG of zeros
// (875 KB) as original_ref with a mask of its size, or as the mask. Each
// is refused from its header, with less than a megabyte allocated.
func TestCompositeRefusesBombs(t *testing.T) {
	bomb := func(w, h int, ct, bd uint8, il bool) []byte { return bombs.PNG(w, h, ct, bd, il) }
	cases := []struct {
		name           string
		original, mask []byte
		status         int
		message        string
	}{
		{"30000² gray original", bomb(30000, 30000, 0, 8, false), bomb(30000, 30000, 0, 8, false), 422, "original_ref is 30000×30000 pixels"},
		{"50000² gray original", bomb(50000, 50000, 0, 8, false), bomb(50000, 50000, 0, 8, false), 422, "over the 256 MiB a mask upload may use"},
		{"16-bit colour original", bomb(30000, 30000, 2, 16, false), bomb(30000, 30000, 0, 8, false), 422, "original_ref is 30000×30000"},
		{"interlaced original", bomb(30000, 30000, 6, 8, true), bomb(30000, 30000, 0, 8, false), 422, "original_ref is 30000×30000"},
		{"jpeg original", bombs.JPEG(30000, 30000, 3, false), bomb(30000, 30000, 0, 8, false), 422, "original_ref is 30000×30000"},
		{"bomb mask on a small original", bomb(2, 2, 0, 8, false), bomb(30000, 30000, 0, 8, false), 422, "differ in size"},
		{"a 1×1 mask on a bomb", bomb(30000, 30000, 0, 8, false), bomb(1, 1, 0, 8, false), 422, "differ in size"},
		{"just over the bound", bomb(6000, 6000, 6, 8, false), bomb(6000, 6000, 6, 8, false), 422, "over the 256 MiB"},
		{"gif original", bombs.GIF(2, 2, 1), bomb(2, 2, 0, 8, false), 422, "not an image comfygate can read"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			allocated := bombs.HeapAllocated(func() {
				err = Composite(context.Background(), &bytes.Buffer{}, bytes.NewReader(tc.original), bytes.NewReader(tc.mask))
			})
			e, ok := apierr.As(err)
			if !ok || e.Status != tc.status || !strings.Contains(e.Message, tc.message) {
				t.Errorf("Composite = %v, want %d saying %q", err, tc.status, tc.message)
			}
			if allocated > 1<<20 {
				t.Errorf("refusing it allocated %d bytes", allocated)
			}
			if compositeBudget.InUse() != 0 {
				t.Errorf("%d bytes of the budget still held", compositeBudget.InUse())
			}
		})
	}
}

// TestCompositeWaitsForTheBudget: a composite waits while other mask
// uploads hold the process's budget, and gives up with its context.
func TestCompositeWaitsForTheBudget(t *testing.T) {
	if err := compositeBudget.Acquire(context.Background(), compositeMemory); err != nil {
		t.Fatal(err)
	}
	defer compositeBudget.Release(compositeMemory)
	small := encode(t, image.NewNRGBA(image.Rect(0, 0, 4, 4)))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Composite(ctx, &bytes.Buffer{}, bytes.NewReader(small), bytes.NewReader(small))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Composite while the budget is held = %v, want the context's error", err)
	}
}
