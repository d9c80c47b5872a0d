package imagebound

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/jpeg"
	"image/png"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/bombs"
)

func TestInspect(t *testing.T) {
	rgb := image.NewRGBA(image.Rect(0, 0, 40, 30))
	for i := range rgb.Pix {
		rgb.Pix[i] = uint8(i)
	}
	cases := []struct {
		name string
		data []byte
		want Info
	}{
		{"gray png bomb", bombs.PNG(30000, 30000, 0, 8, false),
			Info{Format: "png", Width: 30000, Height: 30000, Frames: 1, BitDepth: 8, ColorType: 0}},
		{"interlaced 16-bit rgb", bombs.PNG(50000, 20, 2, 16, true),
			Info{Format: "png", Width: 50000, Height: 20, Frames: 1, BitDepth: 16, ColorType: 2, Interlaced: true}},
		{"palette", bombs.PNG(7, 9, 3, 4, false),
			Info{Format: "png", Width: 7, Height: 9, Frames: 1, BitDepth: 4, ColorType: 3}},
		{"png with tRNS and eXIf", withChunks(t, encodePNG(t, image.NewGray(image.Rect(0, 0, 5, 4))),
			chunk("tRNS", []byte{0, 0}), chunk("eXIf", tiffOrientation(6))),
			Info{Format: "png", Width: 5, Height: 4, Frames: 1, BitDepth: 8, ColorType: 0, Transparency: true, Orientation: 6}},
		{"encoded rgba png", encodePNG(t, image.NewNRGBA(image.Rect(0, 0, 3, 2))),
			Info{Format: "png", Width: 3, Height: 2, Frames: 1, BitDepth: 8, ColorType: 6}},
		{"gray jpeg bomb", bombs.JPEG(65535, 65535, 1, false),
			Info{Format: "jpeg", Width: 65535, Height: 65535, Frames: 1, Components: 1}},
		{"progressive colour jpeg", bombs.JPEG(300, 200, 3, true),
			Info{Format: "jpeg", Width: 300, Height: 200, Frames: 1, Components: 3, Progressive: true}},
		{"encoded jpeg with exif", withAPP1(encodeJPEG(t, rgb), tiffOrientation(8)),
			Info{Format: "jpeg", Width: 40, Height: 30, Frames: 1, Components: 3, Orientation: 8}},
		{"gif of many frames", bombs.GIF(10000, 10000, 500),
			Info{Format: "gif", Width: 10000, Height: 10000, Frames: 500}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Inspect(bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if got.DecodeBytes <= 0 {
				t.Errorf("DecodeBytes = %d", got.DecodeBytes)
			}
			got.DecodeBytes = 0
			if got != tc.want {
				t.Errorf("Inspect = %+v\nwant      %+v", got, tc.want)
			}
		})
	}
}

func TestInspectRefusesWhatIsNotAnImageHeader(t *testing.T) {
	good := bombs.PNG(10, 10, 0, 8, false)
	ihdr := func(mutate func(b []byte)) []byte {
		b := bytes.Clone(good)
		mutate(b[16:29])
		return b
	}
	sof := func(mutate func(b []byte)) []byte {
		b := bombs.JPEG(16, 16, 1, false)
		i := bytes.Index(b, []byte{0xFF, 0xC0}) + 4
		mutate(b[i:])
		return b
	}
	cases := map[string][]byte{
		"empty":                    nil,
		"text":                     []byte("not an image at all"),
		"webp":                     append([]byte("RIFF\x00\x00\x00\x00WEBPVP8 "), make([]byte, 20)...),
		"png signature only":       good[:8],
		"png zero width":           ihdr(func(b []byte) { binary.BigEndian.PutUint32(b, 0) }),
		"png width over 2^31":      ihdr(func(b []byte) { binary.BigEndian.PutUint32(b, 0x80000000) }),
		"png bad depth":            ihdr(func(b []byte) { b[8] = 3 }),
		"png rgb depth 4":          ihdr(func(b []byte) { b[8], b[9] = 4, 2 }),
		"png without IDAT":         append(good[:33], chunk("IEND", nil)...),
		"png truncated in IHDR":    good[:20],
		"png chunk first not IHDR": append([]byte("\x89PNG\r\n\x1a\n"), chunk("IDAT", nil)...),
		"jpeg SOI only":            {0xFF, 0xD8},
		"jpeg 12-bit":              sof(func(b []byte) { b[0] = 12 }),
		"jpeg zero height":         sof(func(b []byte) { b[1], b[2] = 0, 0 }),
		"jpeg two components":      sof(func(b []byte) { b[5] = 2 }),
		"jpeg sampling 0":          sof(func(b []byte) { b[7] = 0x01 }),
		"jpeg arithmetic coding":   bytes.Replace(bombs.JPEG(16, 16, 1, false), []byte{0xFF, 0xC0}, []byte{0xFF, 0xC9}, 1),
		"gif without frames":       append(bombs.GIF(4, 4, 1)[:19], 0x3B),
		"gif truncated":            bombs.GIF(4, 4, 3)[:25],
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			if info, err := Inspect(bytes.NewReader(data)); !errors.Is(err, ErrFormat) {
				t.Errorf("Inspect = %+v, %v; want ErrFormat", info, err)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	big := Info{Format: "png", Width: 30000, Height: 30000, Frames: 1, DecodeBytes: 900_000_000}
	frames := Info{Format: "gif", Width: 1000, Height: 1000, Frames: 300, DecodeBytes: 300_000_000}
	cases := []struct {
		name   string
		info   Info
		limits Limits
		refuse string // "" = allowed, else a substring of the error
	}{
		{"no limits", big, Limits{}, ""},
		{"under both", big, Limits{MaxPixels: 1e9, MaxBytes: 1e9}, ""},
		{"at the pixel limit", big, Limits{MaxPixels: 900_000_000}, ""},
		{"over the pixel limit", big, Limits{MaxPixels: 178956970}, "a 30000×30000 PNG has 900000000 pixels, over the limit of 178956970"},
		{"over the byte limit", big, Limits{MaxBytes: 256 << 20}, "a 30000×30000 PNG takes 858 MiB to decode, over the limit of 256 MiB"},
		{"frames count", frames, Limits{MaxPixels: 100_000_000}, "a 1000×1000 GIF of 300 frames has 300000000 pixels"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.limits.Check(tc.info)
			var tl *TooLargeError
			switch {
			case tc.refuse == "" && err != nil:
				t.Errorf("Check = %v, want nil", err)
			case tc.refuse != "" && (!errors.As(err, &tl) || !strings.Contains(err.Error(), tc.refuse)):
				t.Errorf("Check = %v, want a TooLargeError saying %q", err, tc.refuse)
			}
		})
	}
}

// TestDecodeBytesCoversTheDecoder decodes one image of every kind the
// decoders distinguish and compares what they allocated with DecodeBytes,
// which must cover it without overstating it much.
func TestDecodeBytesCoversTheDecoder(t *testing.T) {
	const w, h = 403, 301
	cases := []struct {
		name  string
		data  []byte
		ratio float64 // DecodeBytes may exceed the allocation by this factor
	}{
		{"gray 1-bit", bombs.PNG(w, h, 0, 1, false), 1.3},
		{"gray 8-bit", bombs.PNG(w, h, 0, 8, false), 1.3},
		{"gray 8-bit with tRNS", withChunks(t, bombs.PNG(w, h, 0, 8, false), chunk("tRNS", []byte{0, 0})), 1.3},
		{"gray 16-bit", bombs.PNG(w, h, 0, 16, false), 1.3},
		{"gray+alpha 16-bit", bombs.PNG(w, h, 4, 16, false), 1.3},
		{"rgb 8-bit", bombs.PNG(w, h, 2, 8, false), 1.3},
		{"rgb 16-bit", bombs.PNG(w, h, 2, 16, false), 1.3},
		{"rgba 8-bit", bombs.PNG(w, h, 6, 8, false), 1.3},
		{"palette", bombs.PNG(w, h, 3, 8, false), 1.3},
		{"interlaced gray", bombs.PNG(w, h, 0, 8, true), 1.3},
		{"interlaced rgba 16-bit", bombs.PNG(w, h, 6, 16, true), 1.3},
		{"jpeg gray", bombs.JPEG(w, h, 1, false), 1.3},
		{"jpeg ycbcr 4:4:4", bombs.JPEG(w, h, 3, false), 2.6},
		{"jpeg ycbcr 4:2:0", encodeJPEG(t, image.NewRGBA(image.Rect(0, 0, w, h))), 3.5},
		{"jpeg progressive gray", bombs.JPEG(w, h, 1, true), 1.3},
		{"jpeg progressive ycbcr", bombs.JPEG(w, h, 3, true), 1.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			info, err := Inspect(bytes.NewReader(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			allocated := allocatedBy(t, func() error {
				_, _, err := Decode(bytes.NewReader(tc.data), Limits{})
				return err
			})
			if allocated > info.DecodeBytes {
				t.Errorf("the decoder allocated %d bytes, DecodeBytes is %d", allocated, info.DecodeBytes)
			}
			if float64(info.DecodeBytes-decoderOverhead) > tc.ratio*float64(allocated) {
				t.Errorf("DecodeBytes %d overstates the %d bytes allocated more than %.1f×", info.DecodeBytes, allocated, tc.ratio)
			}
		})
	}
}

// TestDecodeRefusesBombsBeforeAllocating is the regression test of the
// mask upload that took a gateway to 921 MiB: each bomb is refused with
// less than a megabyte allocated.
func TestDecodeRefusesBombsBeforeAllocating(t *testing.T) {
	limits := Limits{MaxPixels: 178956970, MaxBytes: 256 << 20}
	cases := map[string][]byte{
		"30000² gray png":         bombs.PNG(30000, 30000, 0, 8, false),
		"50000² gray png":         bombs.PNG(50000, 50000, 0, 8, false),
		"30000² rgb png":          bombs.PNG(30000, 30000, 2, 8, false),
		"30000² 16-bit png":       bombs.PNG(30000, 30000, 0, 16, false),
		"30000² interlaced png":   bombs.PNG(30000, 30000, 0, 8, true),
		"12000² 16-bit rgba png":  bombs.PNG(12000, 12000, 6, 16, false), // under the pixels, over the bytes
		"30000² jpeg":             bombs.JPEG(30000, 30000, 1, false),
		"30000² progressive jpeg": bombs.JPEG(30000, 30000, 3, true),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			var tl *TooLargeError
			allocated := allocatedBy(t, func() error {
				_, _, err := Decode(bytes.NewReader(data), limits)
				if !errors.As(err, &tl) {
					t.Errorf("Decode = %v, want a TooLargeError", err)
				}
				return nil
			})
			if allocated > 1<<20 {
				t.Errorf("refusing it allocated %d bytes", allocated)
			}
		})
	}
}

func TestDecodeRefusesGIF(t *testing.T) {
	_, info, err := Decode(bytes.NewReader(bombs.GIF(8, 8, 2)), Limits{})
	if !errors.Is(err, ErrUnsupported) || info.Frames != 2 {
		t.Errorf("Decode = %+v, %v; want ErrUnsupported", info, err)
	}
}

// allocatedBy is the heap bytes f allocated.
func allocatedBy(t *testing.T, f func() error) int64 {
	t.Helper()
	var err error
	n := bombs.HeapAllocated(func() { err = f() })
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func encodePNG(t *testing.T, im image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := png.Encode(&b, im); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func encodeJPEG(t *testing.T, im image.Image) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := jpeg.Encode(&b, im, nil); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// withChunks inserts chunks right after IHDR.
func withChunks(t *testing.T, p []byte, chunks ...[]byte) []byte {
	t.Helper()
	out := bytes.Clone(p[:33])
	for _, c := range chunks {
		out = append(out, c...)
	}
	return append(out, p[33:]...)
}

func chunk(typ string, data []byte) []byte {
	var b bytes.Buffer
	b.Write(binary.BigEndian.AppendUint32(nil, uint32(len(data))))
	b.WriteString(typ)
	b.Write(data)
	crc := crc32.ChecksumIEEE(append([]byte(typ), data...))
	b.Write(binary.BigEndian.AppendUint32(nil, crc))
	return b.Bytes()
}

// withAPP1 inserts an Exif APP1 segment right after SOI.
func withAPP1(j, tiff []byte) []byte {
	seg := append([]byte("Exif\x00\x00"), tiff...)
	out := []byte{0xFF, 0xD8, 0xFF, 0xE1, byte((len(seg) + 2) >> 8), byte(len(seg) + 2)}
	return append(append(out, seg...), j[2:]...)
}

// tiffOrientation is a little-endian TIFF block with one IFD entry:
// Orientation = o.
func tiffOrientation(o uint16) []byte {
	b := []byte("II*\x00\x08\x00\x00\x00")
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = binary.LittleEndian.AppendUint16(b, 0x0112)
	b = binary.LittleEndian.AppendUint16(b, 3)
	b = binary.LittleEndian.AppendUint32(b, 1)
	b = binary.LittleEndian.AppendUint16(b, o)
	b = append(b, 0, 0)
	return binary.LittleEndian.AppendUint32(b, 0)
}
