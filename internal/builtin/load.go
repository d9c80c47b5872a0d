package builtin

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"io"
)

// maxInputBytes bounds how much of an input file LoadImage reads.
const maxInputBytes = 256 << 20

func runLoadImage(c *nodeCall) ([]any, error) {
	v, err := c.raw("image")
	if err != nil {
		return nil, err
	}
	name, ok := v.(string)
	if !ok || name == "" {
		return nil, fmt.Errorf("image: expected a file name, received %s", typeName(v))
	}
	if c.run.env.OpenInput == nil {
		return nil, errors.New("no input opener configured")
	}
	rc, err := c.run.env.OpenInput(c.ctx, name)
	if err != nil {
		//lint:ignore ST1005 ComfyUI's own message, word for word: clients match it
		return nil, fmt.Errorf("Invalid image file: %s: %w", name, err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxInputBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read image %s: %w", name, err)
	}
	if len(data) > maxInputBytes {
		return nil, fmt.Errorf("image %s is larger than %d bytes", name, maxInputBytes)
	}
	im, mask, err := decodeImage(data)
	if err != nil {
		return nil, fmt.Errorf("cannot identify image file %s: %w", name, err)
	}
	return []any{im, mask}, nil
}

// decodeImage turns PNG or JPEG bytes into LoadImage's (IMAGE, MASK), with
// Pillow's conversions:
//   - 8-bit data: float32(v)/255 per RGB channel (gray is replicated).
//   - 16-bit RGB(A) and gray+alpha PNG: Pillow keeps the high byte.
//   - 16-bit gray PNG: Pillow's mode "I", which ComfyUI scales by 1/255 and
//     converts to RGB with a clip: min(v/255, 255) truncated.
//   - MASK is 1 - alpha/255 when the file has an alpha channel or a palette
//     with transparency; otherwise 64×64 zeros, like ComfyUI. A tRNS colour
//     key on gray or RGB images is ignored, as Pillow keeps it out of bands.
//   - EXIF orientation (JPEG APP1, PNG eXIf) is applied like
//     ImageOps.exif_transpose.
func decodeImage(data []byte) (*Image, *Mask, error) {
	cfg, format, err := image.DecodeConfig(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	if int64(cfg.Width)*int64(cfg.Height) > maxTensorPixels {
		return nil, nil, fmt.Errorf("image size (%d pixels) exceeds limit of %d pixels, could be decompression bomb DOS attack", cfg.Width*cfg.Height, maxTensorPixels)
	}
	var src image.Image
	var pngType pngHeader
	switch format {
	case "png":
		pngType, _ = readPNGHeader(data)
		src, err = png.Decode(bytes.NewReader(data))
	case "jpeg":
		src, err = jpeg.Decode(bytes.NewReader(data))
	default:
		return nil, nil, fmt.Errorf("unsupported image format %q", format)
	}
	if err != nil {
		return nil, nil, err
	}
	im, mask, err := toTensors(src, pngType)
	if err != nil {
		return nil, nil, err
	}
	if o := exifOrientation(data, format); o > 1 {
		im = orient(im, o)
		if hasAlpha(src, pngType) {
			m := orient(&Image{B: mask.B, H: mask.H, W: mask.W, C: 1, Pix: mask.Pix}, o)
			mask = &Mask{B: m.B, H: m.H, W: m.W, Pix: m.Pix}
		}
	}
	return im, mask, nil
}

// pngHeader is the part of IHDR that decides Pillow's image mode.
type pngHeader struct {
	bitDepth, colorType byte
	ok                  bool
}

func readPNGHeader(data []byte) (pngHeader, error) {
	if len(data) < 33 || string(data[12:16]) != "IHDR" {
		return pngHeader{}, errors.New("no IHDR")
	}
	return pngHeader{bitDepth: data[24], colorType: data[25], ok: true}, nil
}

// hasAlpha reports whether Pillow would give the image an alpha band (LA,
// RGBA) or a transparent palette, i.e. whether LoadImage's mask is real.
func hasAlpha(src image.Image, h pngHeader) bool {
	if !h.ok {
		return false // JPEG
	}
	switch h.colorType {
	case 4, 6:
		return true
	case 3:
		if p, ok := src.(*image.Paletted); ok {
			for _, c := range p.Palette {
				if _, isN := c.(color.NRGBA); isN {
					return true
				}
			}
		}
	}
	return false
}

func toTensors(src image.Image, h pngHeader) (*Image, *Mask, error) {
	b := src.Bounds()
	w, hgt := b.Dx(), b.Dy()
	im, err := newImage(1, hgt, w)
	if err != nil {
		return nil, nil, err
	}
	alpha := hasAlpha(src, h)
	var mask *Mask
	if alpha {
		mask = &Mask{B: 1, H: hgt, W: w, Pix: make([]float32, w*hgt)}
	} else {
		mask = &Mask{B: 1, H: 64, W: 64, Pix: make([]float32, 64*64)}
	}
	gray16 := h.ok && h.colorType == 0 && h.bitDepth == 16
	for y := 0; y < hgt; y++ {
		for x := 0; x < w; x++ {
			r, g, bl, a := pixel8(src, b.Min.X+x, b.Min.Y+y, gray16)
			i := (y*w + x) * 3
			im.Pix[i], im.Pix[i+1], im.Pix[i+2] = fromUint8(r), fromUint8(g), fromUint8(bl)
			if alpha {
				mask.Pix[y*w+x] = 1 - fromUint8(a)
			}
		}
	}
	return im, mask, nil
}

// pixel8 returns a pixel as the 8-bit, non-premultiplied RGBA that Pillow
// would hold after its mode conversions.
func pixel8(src image.Image, x, y int, gray16 bool) (r, g, b, a uint8) {
	switch s := src.(type) {
	case *image.Gray16:
		v := s.Gray16At(x, y).Y
		var g8 uint8
		if gray16 {
			g8 = uint8(min(int(v)/255, 255))
		} else {
			g8 = uint8(v >> 8)
		}
		return g8, g8, g8, 255
	case *image.NRGBA:
		c := s.NRGBAAt(x, y)
		return c.R, c.G, c.B, c.A
	case *image.NRGBA64:
		c := s.NRGBA64At(x, y)
		return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8), uint8(c.A >> 8)
	case *image.RGBA64:
		c := s.RGBA64At(x, y) // opaque truecolor: premultiplication is a no-op
		return uint8(c.R >> 8), uint8(c.G >> 8), uint8(c.B >> 8), 255
	case *image.Paletted:
		switch c := s.Palette[s.ColorIndexAt(x, y)].(type) {
		case color.NRGBA:
			return c.R, c.G, c.B, c.A
		case color.RGBA:
			return c.R, c.G, c.B, c.A
		}
	}
	c := color.NRGBAModel.Convert(src.At(x, y)).(color.NRGBA)
	return c.R, c.G, c.B, c.A
}

// exifOrientation returns the EXIF Orientation tag (1..8), or 0 if absent.
func exifOrientation(data []byte, format string) int {
	var tiff []byte
	switch format {
	case "jpeg":
		tiff = jpegExif(data)
	case "png":
		tiff = pngChunk(data, "eXIf")
	}
	if len(tiff) < 8 {
		return 0
	}
	var bo binary.ByteOrder
	switch string(tiff[:2]) {
	case "II":
		bo = binary.LittleEndian
	case "MM":
		bo = binary.BigEndian
	default:
		return 0
	}
	off := int(bo.Uint32(tiff[4:8]))
	if off < 0 || off+2 > len(tiff) {
		return 0
	}
	n := int(bo.Uint16(tiff[off:]))
	for i := 0; i < n; i++ {
		e := off + 2 + 12*i
		if e+12 > len(tiff) {
			return 0
		}
		if bo.Uint16(tiff[e:]) == 0x0112 && bo.Uint16(tiff[e+2:]) == 3 {
			if v := int(bo.Uint16(tiff[e+8:])); v >= 1 && v <= 8 {
				return v
			}
			return 0
		}
	}
	return 0
}

// jpegExif returns the TIFF payload of the first APP1 "Exif" segment.
func jpegExif(data []byte) []byte {
	for i := 2; i+4 <= len(data); {
		if data[i] != 0xFF {
			return nil
		}
		marker := data[i+1]
		if marker == 0xDA || marker == 0xD9 { // start of scan / end of image
			return nil
		}
		n := int(binary.BigEndian.Uint16(data[i+2:]))
		if n < 2 || i+2+n > len(data) {
			return nil
		}
		seg := data[i+4 : i+2+n]
		if marker == 0xE1 && bytes.HasPrefix(seg, []byte("Exif\x00\x00")) {
			return seg[6:]
		}
		i += 2 + n
	}
	return nil
}

// pngChunk returns the data of the first chunk of the given type.
func pngChunk(data []byte, typ string) []byte {
	for i := 8; i+12 <= len(data); {
		n := int(binary.BigEndian.Uint32(data[i:]))
		if n < 0 || i+12+n > len(data) {
			return nil
		}
		if string(data[i+4:i+8]) == typ {
			return data[i+8 : i+8+n]
		}
		if string(data[i+4:i+8]) == "IDAT" && typ != "IDAT" {
			// eXIf must precede IDAT; stop early on large images.
			return nil
		}
		i += 12 + n
	}
	return nil
}

// orient applies an EXIF orientation the way ImageOps.exif_transpose does
// (2 mirror, 3 rotate 180, 4 flip, 5 transpose, 6 rotate 90° clockwise,
// 7 transverse, 8 rotate 90° counter-clockwise).
func orient(im *Image, o int) *Image {
	switch o {
	case 2:
		return remap(im, im.H, im.W, func(y, x int) (int, int) { return y, im.W - 1 - x })
	case 3:
		return rotate(im, "180 degrees")
	case 4:
		return remap(im, im.H, im.W, func(y, x int) (int, int) { return im.H - 1 - y, x })
	case 5:
		return remap(im, im.W, im.H, func(y, x int) (int, int) { return x, y })
	case 6:
		return rotate(im, "90 degrees")
	case 7:
		return remap(im, im.W, im.H, func(y, x int) (int, int) { return im.H - 1 - x, im.W - 1 - y })
	case 8:
		return rotate(im, "270 degrees")
	}
	return im
}
