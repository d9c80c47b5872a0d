package imagebound

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"runtime"
	"testing"

	"github.com/comfygate/comfygate/tests/bombs"
)

func fuzzSeeds(f *testing.F) {
	var buf bytes.Buffer
	im := image.NewNRGBA(image.Rect(0, 0, 5, 3))
	im.Set(1, 1, color.NRGBA{1, 2, 3, 4})
	_ = png.Encode(&buf, im)
	f.Add(buf.Bytes())
	for _, ct := range []uint8{0, 2, 3, 4, 6} {
		f.Add(bombs.PNG(40, 30, ct, 8, ct%2 == 0))
	}
	f.Add(bombs.PNG(30000, 30000, 0, 8, false))
	f.Add(bombs.PNG(64, 64, 6, 16, true))
	f.Add(bombs.PNG(64, 64, 0, 1, false))
	f.Add(bombs.JPEG(24, 16, 3, false))
	f.Add(bombs.JPEG(24, 16, 1, true))
	f.Add(bombs.JPEG(50000, 50000, 3, true))
	f.Add(bombs.GIF(8, 8, 3))
	f.Add([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\x0dIHDR"))
	f.Add([]byte{0xff, 0xd8, 0xff, 0xe1, 0x00, 0x02})
	f.Add([]byte("GIF89a"))
}

// FuzzInspect: a header Inspect accepts describes an image the stdlib's
// DecodeConfig agrees with, and a refusal is ErrFormat.
func FuzzInspect(f *testing.F) {
	fuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		info, err := Inspect(bytes.NewReader(data))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("Inspect refused with %v, not ErrFormat", err)
			}
			return
		}
		if info.Width <= 0 || info.Height <= 0 || info.Frames < 1 || info.DecodeBytes < info.Pixels() {
			t.Fatalf("Inspect = %+v: empty, frameless or cheaper than a byte a pixel", info)
		}
		if info.Orientation < 0 || info.Orientation > 8 {
			t.Fatalf("orientation %d", info.Orientation)
		}
		if info.Format == "gif" {
			return // the gateway links no GIF decoder
		}
		cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
		if err == nil && (format != info.Format || cfg.Width != info.Width || cfg.Height != info.Height) {
			t.Fatalf("Inspect = %s %d×%d; DecodeConfig = %s %d×%d", info.Format, info.Width, info.Height, format, cfg.Width, cfg.Height)
		}
	})
}

// decodeSlack covers a decoder's fixed buffers (zlib window, Huffman
// tables, bufio) beside the raster DecodeBytes accounts for.
const decodeSlack = 1 << 20

// FuzzDecode: Decode never allocates much past the DecodeBytes it checked
// (nor anything like a raster when it refuses one over the limit), and an
// image it returns has the inspected size.
func FuzzDecode(f *testing.F) {
	fuzzSeeds(f)
	lim := Limits{MaxBytes: 4 << 20}
	f.Fuzz(func(t *testing.T, data []byte) {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		im, info, err := Decode(bytes.NewReader(data), lim)
		runtime.ReadMemStats(&after)
		allocated := int64(after.TotalAlloc - before.TotalAlloc)
		var tooLarge *TooLargeError
		switch {
		case errors.As(err, &tooLarge):
			if allocated > decodeSlack {
				t.Fatalf("refusing %+v allocated %d bytes", info, allocated)
			}
			return
		case err != nil:
			if !errors.Is(err, ErrFormat) && !errors.Is(err, ErrUnsupported) {
				t.Fatalf("Decode refused with %v, neither ErrFormat nor ErrUnsupported", err)
			}
		default:
			if b := im.Bounds(); b.Dx() != info.Width || b.Dy() != info.Height {
				t.Fatalf("decoded %v from a %d×%d header", b, info.Width, info.Height)
			}
		}
		if info.DecodeBytes > lim.MaxBytes {
			t.Fatalf("decoded %+v past the %d-byte limit", info, lim.MaxBytes)
		}
		if allocated > info.DecodeBytes+int64(len(data))+decodeSlack {
			t.Fatalf("decoding %+v allocated %d bytes; DecodeBytes says %d", info, allocated, info.DecodeBytes)
		}
	})
}

// TestPNGDecodeBytesDoesNotWrap: FuzzInspect found an IHDR of
// 808464432×808464432 16-bit interlaced RGBA whose DecodeBytes wrapped to a
// negative number, which every MaxBytes bound let through.
func TestPNGDecodeBytesDoesNotWrap(t *testing.T) {
	chunk := func(typ string, data []byte) []byte {
		var b bytes.Buffer
		_ = binary.Write(&b, binary.BigEndian, uint32(len(data)))
		b.WriteString(typ)
		b.Write(data)
		_ = binary.Write(&b, binary.BigEndian, crc32.ChecksumIEEE(append([]byte(typ), data...)))
		return b.Bytes()
	}
	for _, side := range []uint32{808464432, 1<<31 - 1} {
		ihdr := binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, side), side)
		ihdr = append(ihdr, 16, 6, 0, 0, 1) // 16-bit RGBA, Adam7
		file := append([]byte(pngSignature), chunk("IHDR", ihdr)...)
		file = append(file, chunk("IDAT", []byte{0x78, 0x9c})...)
		info, err := Inspect(bytes.NewReader(file))
		if err != nil {
			t.Fatal(err)
		}
		if info.DecodeBytes <= 0 {
			t.Fatalf("%d² pixels: DecodeBytes = %d", side, info.DecodeBytes)
		}
		if err := (Limits{MaxBytes: 1 << 30}).Check(info); err == nil {
			t.Fatalf("%d² pixels passed a 1 GiB bound", side)
		}
		if _, _, err := Decode(bytes.NewReader(file), Limits{MaxBytes: 1 << 30}); err == nil {
			t.Fatalf("Decode of %d² pixels did not refuse", side)
		}
	}
}
