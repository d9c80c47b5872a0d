package builtin

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"io"
	"strings"

	"github.com/comfygate/comfygate/internal/imagebound"
)

// maxInputBytes bounds how much of an input file LoadImage reads.
const maxInputBytes = 256 << 20

// assetPrefix marks a LoadImage image that names an asset by id (a
// core/ASSET reference) instead of a file. It starts with a NUL byte, which
// no file path holds.
const assetPrefix = "\x00asset:"

// AssetInput is the LoadImage image that stands for the asset id.
func AssetInput(id string) string { return assetPrefix + id }

// AssetID is the asset id name stands for, if it is an AssetInput.
func AssetID(name string) (string, bool) { return strings.CutPrefix(name, assetPrefix) }

// shownInput is name as messages show it: an asset as "asset <id>".
func shownInput(name string) string {
	if id, ok := AssetID(name); ok {
		return "asset " + id
	}
	return name
}

// LoadImage charges its memory itself, as it learns it: the file's bytes
// as they are read (at once when the opener tells the size), then, from
// the file's header, what decoding it takes (loadCost).
func runLoadImage(c *nodeCall) ([]any, error) {
	name, err := c.inputName()
	if err != nil {
		return nil, err
	}
	if c.run.env.OpenInput == nil {
		return nil, errors.New("no input opener configured")
	}
	rc, err := c.run.env.OpenInput(c.ctx, name)
	if err != nil {
		//lint:ignore ST1005 ComfyUI's own message, word for word: clients match it
		return nil, fmt.Errorf("Invalid image file: %s: %w", shownInput(name), err)
	}
	defer rc.Close()
	data, err := c.readInput(rc, name)
	if err != nil {
		return nil, err
	}
	info, err := imagebound.Inspect(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("cannot identify image file %s: %w", shownInput(name), err)
	}
	_, _, n, err := loadCost(info)
	if err != nil {
		return nil, fmt.Errorf("cannot identify image file %s: %w", shownInput(name), err)
	}
	if err := c.charge(n); err != nil {
		return nil, err
	}
	im, mask, err := decodeImage(data)
	if err != nil {
		return nil, fmt.Errorf("cannot identify image file %s: %w", shownInput(name), err)
	}
	return []any{im, mask}, nil
}

// inputName reads LoadImage's image widget.
func (c *nodeCall) inputName() (string, error) {
	v, err := c.raw("image")
	if err != nil {
		return "", err
	}
	name, ok := v.(string)
	if !ok || name == "" {
		return "", fmt.Errorf("image: expected a file name, received %s", typeName(v))
	}
	return name, nil
}

// inputSize is the size of an opened input when its reader tells it.
func inputSize(r io.Reader) (int64, bool) {
	if s, ok := r.(interface{ Size() int64 }); ok && s.Size() >= 0 {
		return s.Size(), true
	}
	return 0, false
}

// readInputChunk is the first buffer of an input whose size is unknown;
// it doubles from there.
const readInputChunk = 64 << 10

// readBufferBytes is the most readInput holds for a file of size bytes:
// one buffer of its size when the opener tells it, else a doubling buffer
// and, while it grows, the one before.
func readBufferBytes(size int64, known bool) int64 {
	if known {
		return size + 1
	}
	c := int64(readInputChunk)
	for c <= size {
		c = min(2*c, maxInputBytes+1)
	}
	return c + c/2
}

// readInput reads an input file, charging each buffer before it is
// allocated.
func (c *nodeCall) readInput(r io.Reader, name string) ([]byte, error) {
	tooLarge := fmt.Errorf("image %s is larger than %d bytes", shownInput(name), maxInputBytes)
	size, known := inputSize(r)
	first := int64(readInputChunk)
	if known {
		first = size + 1 // +1 to see EOF without growing
	}
	if first > maxInputBytes+1 {
		return nil, tooLarge
	}
	if err := c.charge(first); err != nil {
		return nil, err
	}
	buf := make([]byte, 0, first)
	for {
		if len(buf) == cap(buf) {
			if cap(buf) > maxInputBytes {
				return nil, tooLarge
			}
			next := min(2*int64(cap(buf)), maxInputBytes+1)
			if err := c.charge(next); err != nil {
				return nil, err
			}
			grown := make([]byte, len(buf), next)
			copy(grown, buf)
			c.release(int64(cap(buf)))
			buf = grown
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read image %s: %w", shownInput(name), err)
		}
	}
	if len(buf) > maxInputBytes {
		return nil, tooLarge
	}
	return buf, nil
}

// bombError is Pillow's refusal of an image over maxTensorPixels, which
// ComfyUI's LoadImage answers.
func bombError(info imagebound.Info) error {
	return fmt.Errorf("image size (%d pixels) exceeds limit of %d pixels, could be decompression bomb DOS attack", info.Pixels(), maxTensorPixels)
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
//
// The header is read first (imagebound): an image over maxTensorPixels is
// refused before it is decoded.
func decodeImage(data []byte) (*Image, *Mask, error) {
	info, err := imagebound.Inspect(bytes.NewReader(data))
	if err != nil {
		return nil, nil, err
	}
	if info.Format != "png" && info.Format != "jpeg" {
		return nil, nil, fmt.Errorf("unsupported image format %q", info.Format)
	}
	if info.Pixels() > maxTensorPixels {
		return nil, nil, bombError(info)
	}
	src, _, err := imagebound.Decode(bytes.NewReader(data), imagebound.Limits{MaxPixels: maxTensorPixels})
	if err != nil {
		return nil, nil, err
	}
	pngType := pngHeader{bitDepth: info.BitDepth, colorType: info.ColorType, ok: info.Format == "png"}
	im, mask, err := toTensors(src, pngType)
	if err != nil {
		return nil, nil, err
	}
	if o := info.Orientation; o > 1 {
		im = orient(im, o)
		if hasAlpha(src, pngType) {
			m := orient(&Image{B: mask.B, H: mask.H, W: mask.W, C: 1, Pix: mask.Pix}, o)
			mask = &Mask{B: m.B, H: m.H, W: m.W, Pix: m.Pix}
		}
	}
	return im, mask, nil
}

// hasAlphaChannel is hasAlpha from the header alone, for loadCost.
func hasAlphaChannel(info imagebound.Info) bool {
	return info.Format == "png" && (info.ColorType == 4 || info.ColorType == 6 || info.ColorType == 3 && info.Transparency)
}

// pngHeader is the part of IHDR that decides Pillow's image mode.
type pngHeader struct {
	bitDepth, colorType byte
	ok                  bool
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
	// Gray, RGBA, YCbCr, CMYK: RGBA64At gives what At(x, y).RGBA() does
	// without boxing a color per pixel (gigabytes of garbage for a large
	// JPEG), then color.NRGBAModel's conversion.
	var cr, cg, cb, ca uint32
	if s, ok := src.(image.RGBA64Image); ok {
		c := s.RGBA64At(x, y)
		cr, cg, cb, ca = uint32(c.R), uint32(c.G), uint32(c.B), uint32(c.A)
	} else {
		cr, cg, cb, ca = src.At(x, y).RGBA()
	}
	return nrgba8(cr, cg, cb, ca)
}

// nrgba8 is color.NRGBAModel's conversion of a premultiplied 16-bit
// colour.
func nrgba8(r, g, b, a uint32) (uint8, uint8, uint8, uint8) {
	switch a {
	case 0xffff:
		return uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), 0xff
	case 0:
		return 0, 0, 0, 0
	}
	return uint8((r * 0xffff) / a >> 8), uint8((g * 0xffff) / a >> 8), uint8((b * 0xffff) / a >> 8), uint8(a >> 8)
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
