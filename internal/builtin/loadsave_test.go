package builtin

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math"
	"strings"
	"testing"
)

// TestInvertRoundTripAllValues checks LoadImage → ImageInvert → SaveImage
// for every 8-bit value against an independent float64 model of ComfyUI's
// float32 arithmetic (each step's exact result rounded to float32). It also
// pins the consequence the brief's "255 - v" expectation misses: float32
// makes 159 of 256 values land one below 255 - v, e.g. 65 → 189.
func TestInvertRoundTripAllValues(t *testing.T) {
	src := image.NewNRGBA(image.Rect(0, 0, 256, 1))
	for v := 0; v < 256; v++ {
		src.SetNRGBA(v, 0, color.NRGBA{uint8(v), uint8(v), uint8(255 - v), 255})
	}
	loaded, err := callNode(t, "LoadImage", map[string]any{"image": "in.png"}, Env{OpenInput: opener(map[string][]byte{"in.png": encodePNG(t, src)})})
	if err != nil {
		t.Fatal(err)
	}
	inverted, err := callNode(t, "ImageInvert", map[string]any{"image": loaded[0]}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	var saved []Output
	_, err = callNode(t, "SaveImage", map[string]any{"images": inverted[0], "filename_prefix": "inv"}, Env{
		OnOutput: func(_ context.Context, o Output) error { saved = append(saved, o); return nil },
	})
	if err != nil || len(saved) != 1 {
		t.Fatalf("save: %v, %d outputs", err, len(saved))
	}
	out, err := png.Decode(bytes.NewReader(saved[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	model := func(v int) uint8 { return invertModel(uint8(v)) }
	belowNaive := 0
	for v := 0; v < 256; v++ {
		r, g, b, _ := out.At(v, 0).RGBA()
		want := model(v)
		if uint8(r>>8) != want || uint8(g>>8) != want || uint8(b>>8) != model(255-v) {
			t.Fatalf("value %d: got (%d,%d,%d), want (%d,%d,%d)", v, r>>8, g>>8, b>>8, want, want, model(255-v))
		}
		if int(want) != 255-v {
			if int(want) != 254-v {
				t.Fatalf("value %d inverted to %d, more than one below 255-v", v, want)
			}
			belowNaive++
		}
	}
	if model(65) != 189 || model(0) != 255 || model(255) != 0 || belowNaive != 159 {
		t.Fatalf("float32 model changed: 65→%d, 0→%d, 255→%d, %d values below 255-v", model(65), model(0), model(255), belowNaive)
	}
}

func TestLoadSaveIsLossless(t *testing.T) {
	for v := 0; v < 256; v++ {
		if got := toUint8(fromUint8(uint8(v))); got != uint8(v) {
			t.Fatalf("load/save of %d gives %d", v, got)
		}
	}
}

func TestLoadImageFormats(t *testing.T) {
	rgba := image.NewNRGBA(image.Rect(0, 0, 2, 1))
	rgba.SetNRGBA(0, 0, color.NRGBA{10, 20, 30, 255})
	rgba.SetNRGBA(1, 0, color.NRGBA{40, 50, 60, 64})
	rgb16 := image.NewRGBA64(image.Rect(0, 0, 2, 1))
	rgb16.SetRGBA64(0, 0, color.RGBA64{0x1234, 0xABFF, 0x00FF, 0xFFFF})
	rgb16.SetRGBA64(1, 0, color.RGBA64{0xFFFF, 0, 0x8000, 0xFFFF})
	gray16 := image.NewGray16(image.Rect(0, 0, 2, 1))
	gray16.SetGray16(0, 0, color.Gray16{Y: 255 * 100})
	gray16.SetGray16(1, 0, color.Gray16{Y: 65535})
	pal := image.NewPaletted(image.Rect(0, 0, 2, 1), color.Palette{color.NRGBA{1, 2, 3, 255}, color.NRGBA{4, 5, 6, 0}})
	pal.SetColorIndex(1, 0, 1)
	gray8 := image.NewGray(image.Rect(0, 0, 2, 1))
	gray8.SetGray(0, 0, color.Gray{Y: 77})

	tests := []struct {
		name     string
		file     []byte
		wantRGB  [][3]uint8
		wantMask []float32 // nil: 64×64 zeros
	}{
		{"rgba 8-bit", encodePNG(t, rgba), [][3]uint8{{10, 20, 30}, {40, 50, 60}}, []float32{0, 1 - fromUint8(64)}},
		{"rgb 16-bit keeps high byte", encodePNG(t, rgb16), [][3]uint8{{0x12, 0xAB, 0x00}, {0xFF, 0, 0x80}}, nil},
		{"gray 16-bit as mode I", encodePNG(t, gray16), [][3]uint8{{100, 100, 100}, {255, 255, 255}}, nil},
		{"palette with transparency", encodePNG(t, pal), [][3]uint8{{1, 2, 3}, {4, 5, 6}}, []float32{0, 1}},
		{"gray 8-bit", encodePNG(t, gray8), [][3]uint8{{77, 77, 77}, {0, 0, 0}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			im, mask, err := decodeImage(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if im.B != 1 || im.H != 1 || im.W != 2 || im.C != 3 {
				t.Fatalf("shape %+v", im)
			}
			for x, want := range tc.wantRGB {
				for ch := 0; ch < 3; ch++ {
					if got := im.Pix[x*3+ch]; got != fromUint8(want[ch]) {
						t.Fatalf("pixel %d channel %d = %v, want %v/255", x, ch, got, want[ch])
					}
				}
			}
			if tc.wantMask == nil {
				if mask.H != 64 || mask.W != 64 || len(mask.Pix) != 64*64 {
					t.Fatalf("mask %dx%d, want 64x64 zeros", mask.W, mask.H)
				}
				for _, v := range mask.Pix {
					if v != 0 {
						t.Fatal("mask not zero")
					}
				}
				return
			}
			if mask.H != 1 || mask.W != 2 || mask.Pix[0] != tc.wantMask[0] || mask.Pix[1] != tc.wantMask[1] {
				t.Fatalf("mask %+v, want %v", mask, tc.wantMask)
			}
		})
	}
}

func TestLoadImageJPEGAndOrientation(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 16, 8))
	for y := 0; y < 8; y++ {
		for x := 0; x < 16; x++ {
			v := uint8(0)
			if x < 8 {
				v = 255
			}
			src.SetRGBA(x, y, color.RGBA{v, v, v, 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, src, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	plain := buf.Bytes()
	// Splice an APP1 Exif segment with Orientation 6 (rotate 90° clockwise)
	// after SOI.
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x06\x00\x00\x00\x00\x00\x00")
	app1 := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, 0xE1, 0, 0}
	binary.BigEndian.PutUint16(seg[2:], uint16(len(app1)+2))
	rotated := append(append(append([]byte{}, plain[:2]...), append(seg, app1...)...), plain[2:]...)

	for _, tc := range []struct {
		name         string
		file         []byte
		wantW, wantH int
		whiteAt      [2]int // (y, x) of a pixel that must be white
	}{
		{"plain", plain, 16, 8, [2]int{4, 2}},
		{"exif orientation 6", rotated, 8, 16, [2]int{2, 4}}, // left half becomes top half
	} {
		t.Run(tc.name, func(t *testing.T) {
			im, mask, err := decodeImage(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			if im.W != tc.wantW || im.H != tc.wantH {
				t.Fatalf("got %dx%d, want %dx%d", im.W, im.H, tc.wantW, tc.wantH)
			}
			if v := im.Pix[(tc.whiteAt[0]*im.W+tc.whiteAt[1])*3]; v < 0.9 {
				t.Fatalf("pixel %v = %v, want white", tc.whiteAt, v)
			}
			if v := im.Pix[((im.H-3)*im.W+im.W-3)*3]; v > 0.1 {
				t.Fatalf("bottom-right pixel = %v, want black", v)
			}
			if mask.W != 64 || mask.H != 64 {
				t.Fatalf("jpeg mask should be 64x64 zeros, got %dx%d", mask.W, mask.H)
			}
		})
	}
}

func TestSaveImageNamingAndMetadata(t *testing.T) {
	frames, err := newImage(2, 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	for i := range frames.Pix {
		frames.Pix[i] = float32(i%7) / 6
	}
	prompt := []byte(`{"1":{"class_type":"SaveImage","inputs":{"filename_prefix":"café"}}}`)
	var got []Output
	env := Env{
		PromptJSON:   prompt,
		ExtraPNGInfo: map[string]any{"workflow": map[string]any{"nodes": []any{}}},
		OnOutput:     func(_ context.Context, o Output) error { got = append(got, o); return nil },
		JobPrefix:    "job-1",
	}
	if _, err := callNode(t, "SaveImage", map[string]any{"images": frames, "filename_prefix": "sub/dir/pic_%width%x%height%"}, env); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("%d outputs, want 2", len(got))
	}
	for i, o := range got {
		wantName := []string{"pic_3x2_00001_.png", "pic_3x2_00002_.png"}[i]
		if o.Filename != wantName || o.Subfolder != "job-1/sub/dir" || o.Type != "output" || o.Kind != "images" || o.ContentType != "image/png" || o.NodeID != "n" {
			t.Fatalf("output %d = %+v", i, o)
		}
		dec, err := png.Decode(bytes.NewReader(o.Data))
		if err != nil {
			t.Fatal(err)
		}
		for y := 0; y < 2; y++ {
			for x := 0; x < 3; x++ {
				r, g, b, _ := dec.At(x, y).RGBA()
				p := frames.frame(i)[(y*3+x)*3:]
				if uint8(r>>8) != toUint8(p[0]) || uint8(g>>8) != toUint8(p[1]) || uint8(b>>8) != toUint8(p[2]) {
					t.Fatalf("frame %d pixel (%d,%d) mismatch", i, x, y)
				}
			}
		}
		texts := readTextChunks(t, o.Data)
		var decoded map[string]any
		if err := json.Unmarshal([]byte(texts["prompt"]), &decoded); err != nil {
			t.Fatalf("prompt chunk is not JSON: %v", err)
		}
		if !strings.Contains(texts["prompt"], `caf\u00e9`) {
			t.Fatalf("prompt chunk should escape non-ASCII: %q", texts["prompt"])
		}
		if decoded["1"].(map[string]any)["inputs"].(map[string]any)["filename_prefix"] != "café" {
			t.Fatalf("prompt chunk lost content: %v", decoded)
		}
		if texts["workflow"] != `{"nodes":[]}` {
			t.Fatalf("workflow chunk = %q", texts["workflow"])
		}
	}

	if _, err := callNode(t, "SaveImage", map[string]any{"images": frames, "filename_prefix": "../escape"}, Env{}); err == nil {
		t.Fatal("prefix escaping the output folder must fail")
	}
}

func TestPreviewImage(t *testing.T) {
	im := gray(t, [][]float32{{.5}})
	var got []Output
	if _, err := callNode(t, "PreviewImage", map[string]any{"images": im}, Env{OnOutput: func(_ context.Context, o Output) error { got = append(got, o); return nil }}); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Type != "temp" || !strings.HasPrefix(got[0].Filename, "ComfyUI_temp_") || !strings.HasSuffix(got[0].Filename, "_00001_.png") || len(got[0].Filename) != len("ComfyUI_temp_abcde_00001_.png") {
		t.Fatalf("preview output %+v", got)
	}
	for _, r := range got[0].Filename[len("ComfyUI_temp_"):][:5] {
		if !strings.ContainsRune(previewLetters, r) {
			t.Fatalf("suffix letter %q not in ComfyUI's alphabet", r)
		}
	}
}

// readTextChunks parses a PNG's tEXt chunks, checking every CRC.
func readTextChunks(t *testing.T, data []byte) map[string]string {
	t.Helper()
	out := map[string]string{}
	for i := 8; i+12 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[i:]))
		typ := string(data[i+4 : i+8])
		body := data[i+8 : i+8+n]
		if crc := binary.BigEndian.Uint32(data[i+8+n:]); crc != crc32IEEE(data[i+4:i+8+n]) {
			t.Fatalf("chunk %s has a bad CRC", typ)
		}
		if typ == "tEXt" {
			k, v, _ := bytes.Cut(body, []byte{0})
			out[string(k)] = string(v)
		}
		i += 12 + n
	}
	return out
}

func crc32IEEE(b []byte) uint32 { return crc32.ChecksumIEEE(b) }

// invertModel is an independent model of ComfyUI's load → 1-x → save in
// float64: every step's exact result, rounded to float32 as numpy/torch do.
func invertModel(v uint8) uint8 {
	x := float64(float32(float64(v) / 255)) // load: float32 v/255
	y := float64(float32(1 - x))            // invert: exact difference, rounded
	o := float64(float32(255 * y))          // save: exact product, rounded
	return uint8(math.Trunc(min(max(o, 0), 255)))
}
