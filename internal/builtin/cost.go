package builtin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/comfygate/comfygate/internal/imagebound"
)

// tensor is the shape of an IMAGE (c = 3) or MASK (c = 1) that an estimate
// follows in place of its pixels.
type tensor struct{ b, h, w, c int }

func (t *tensor) bytes() int64 {
	return 4 * int64(t.b) * int64(t.h) * int64(t.w) * int64(t.c)
}

// unknownOutput stands, in an estimate, for the outputs of a node whose
// cost could not be told before it runs (an input that cannot be opened,
// a widget that does not parse: the run reports it when it gets there).
type unknownOutput struct{}

var errUnknown = errors.New("builtin: not known before the run")

// imageTensor is the shape of a new b×h×w image, refused as newImage
// refuses it.
func imageTensor(b, h, w int) (*tensor, error) {
	if err := checkImageSize(b, h, w); err != nil {
		return nil, err
	}
	return &tensor{b: b, h: h, w: w, c: 3}, nil
}

// shape reads an IMAGE input as its shape: a fresh one for a real image,
// the estimate's own for an estimated one (a node that passes it through
// returns that very value, which the estimate then holds once).
func (c *nodeCall) shape(name string) (*tensor, error) {
	v, err := c.raw(name)
	if err != nil {
		return nil, err
	}
	switch t := v.(type) {
	case *Image:
		return &tensor{b: t.B, h: t.H, w: t.W, c: t.C}, nil
	case *tensor:
		if t.c == 3 {
			return t, nil
		}
	case unknownOutput:
		return nil, errUnknown
	}
	return nil, fmt.Errorf("input %s: received %s, expected IMAGE", name, typeName(v))
}

// A node's cost is what it allocates when it runs on inputs of the shapes
// it reads: its outputs (a value it passes through unchanged is returned
// as is) and, in bytes, everything it allocates, outputs included. The
// executor charges it before the node runs; an estimate follows it through
// the whole prompt. Costs share their arithmetic with the nodes (target
// sizes, crop rectangles, buffer sizes), so that the two cannot drift.

func sameShapeCost(name string) func(c *nodeCall) ([]any, int64, error) {
	return func(c *nodeCall) ([]any, int64, error) {
		t, err := c.shape(name)
		if err != nil {
			return nil, 0, err
		}
		out := *t
		return []any{&out}, out.bytes(), nil
	}
}

// costImageBlur is the result and the bands' rows of one frame (frames run
// one after the other).
func costImageBlur(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("image")
	if err != nil {
		return nil, 0, err
	}
	radius, err := c.intValue("blur_radius")
	if err != nil {
		return nil, 0, err
	}
	out := *t
	return []any{&out}, out.bytes() + blurScratch(t.h, t.w, t.c, radius), nil
}

func costEmptyImage(c *nodeCall) ([]any, int64, error) {
	v, err := c.intValues("width", "height", "batch_size")
	if err != nil {
		return nil, 0, err
	}
	t, err := imageTensor(v[2], v[1], v[0])
	if err != nil {
		return nil, 0, err
	}
	return []any{t}, t.bytes(), nil
}

func costImageCrop(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("image")
	if err != nil {
		return nil, 0, err
	}
	v, err := c.intValues(cropWidgets...)
	if err != nil {
		return nil, 0, err
	}
	_, _, w, h := cropRect(t.w, t.h, v[0], v[1], v[2], v[3])
	out := &tensor{b: t.b, h: h, w: w, c: t.c}
	return []any{out}, out.bytes(), nil
}

func costImageRotate(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("image")
	if err != nil {
		return nil, 0, err
	}
	rotation, err := c.comboValue("rotation")
	if err != nil {
		return nil, 0, err
	}
	out := *t
	switch rotation {
	case "none":
		return []any{t}, 0, nil
	case "90 degrees", "270 degrees":
		out.h, out.w = t.w, t.h
	}
	return []any{&out}, out.bytes(), nil
}

func costImageScale(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("image")
	if err != nil {
		return nil, 0, err
	}
	method, w, h, center, err := scaleWidgets(c)
	if err != nil {
		return nil, 0, err
	}
	if w == 0 && h == 0 {
		return []any{t}, 0, nil
	}
	w, h = scaleTarget(t.w, t.h, w, h)
	return upscaleCost(t, w, h, method, center)
}

func costImageScaleBy(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("image")
	if err != nil {
		return nil, 0, err
	}
	method, s, err := scaleByWidgets(c)
	if err != nil {
		return nil, 0, err
	}
	w, h := scaleByTarget(t.w, t.h, s)
	return upscaleCost(t, w, h, method, false)
}

// upscaleCost is commonUpscale's: the center crop's copy, the result and
// lanczos's 8-bit planes.
func upscaleCost(t *tensor, w, h int, method string, centerCrop bool) ([]any, int64, error) {
	if err := checkUpscale(t.b, w, h); err != nil {
		return nil, 0, err
	}
	out := &tensor{b: t.b, h: h, w: w, c: 3}
	n := out.bytes()
	sw, sh := t.w, t.h
	if centerCrop {
		if x, y := centerCropOffsets(t.w, t.h, w, h); x != 0 || y != 0 {
			sw, sh = t.w-2*x, t.h-2*y
			n += (&tensor{b: t.b, h: sh, w: sw, c: t.c}).bytes()
		}
	}
	if method == "lanczos" {
		n += lanczosScratch(sw, sh, w, h)
	}
	return []any{out}, n, nil
}

func costImageBlend(c *nodeCall) ([]any, int64, error) {
	t1, err := c.shape("image1")
	if err != nil {
		return nil, 0, err
	}
	t2, err := c.shape("image2")
	if err != nil {
		return nil, 0, err
	}
	var n int64
	if t1.h != t2.h || t1.w != t2.w {
		resized, rn, err := upscaleCost(t2, t1.w, t1.h, "bicubic", true)
		if err != nil {
			return nil, 0, err
		}
		t2, n = resized[0].(*tensor), rn
	}
	out, err := imageTensor(max(t1.b, t2.b), t1.h, t1.w)
	if err != nil {
		return nil, 0, err
	}
	return []any{out}, n + out.bytes(), nil
}

// costSave is saveImages's: the text chunks, built once per node (an
// escaped copy of the prompt, then the chunk), and one frame at a time its
// 8-bit raster, the encoder's state and the PNG, written into a buffer of
// its largest possible size with the chunks inside.
func costSave(c *nodeCall) ([]any, int64, error) {
	t, err := c.shape("images")
	if err != nil {
		return nil, 0, err
	}
	text, err := c.textChunkBytes()
	if err != nil {
		return nil, 0, err
	}
	return nil, 2*text + saveFrameBytes(t.h, t.w, text), nil
}

// saveFrameBytes is what encoding one h×w frame holds: the RGBA raster,
// the PNG encoder's compressor, and the output buffer (pngBound plus the
// text chunks).
func saveFrameBytes(h, w int, text int64) int64 {
	return 4*int64(h)*int64(w) + pngEncoderBytes + pngBound(h, w) + text
}

// pngEncoderBytes covers image/png's compressor state (hash chains, window,
// row filters) for one Encode.
const pngEncoderBytes = 2 << 20

// pngBound is the largest PNG image/png writes for an opaque h×w frame
// (8-bit RGB): the filtered rows (a filter byte and 3 bytes a pixel) plus
// deflate's stored-block overhead (5 bytes per 64 KiB), the 12 bytes of
// each IDAT chunk of at most 8 KiB, and the signature, IHDR and IEND.
func pngBound(h, w int) int64 {
	raw := int64(h) * (1 + 3*int64(w))
	return raw + raw/512 + 4096
}

// textChunkBytes is the size of the tEXt chunks textChunks builds.
func (c *nodeCall) textChunkBytes() (int64, error) {
	var n int64
	if p := c.run.env.PromptJSON; p != nil {
		n += 13 + int64(len("prompt")) + asciiJSONLen(p)
	}
	for k, v := range c.run.env.ExtraPNGInfo {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(v); err != nil {
			return 0, fmt.Errorf("extra_pnginfo %s: %w", k, err)
		}
		n += 13 + int64(len(k)) + asciiJSONLen(bytes.TrimRight(buf.Bytes(), "\n"))
	}
	return n, nil
}

// costLoadImage is LoadImage's, for an estimate: it opens the input and
// reads its header (and, when the opener does not tell its size, the rest
// of it, to count it).
func costLoadImage(c *nodeCall) ([]any, int64, error) {
	name, err := c.inputName()
	if err != nil {
		return nil, 0, err
	}
	if c.run.env.OpenInput == nil {
		return nil, 0, errUnknown
	}
	rc, err := c.run.env.OpenInput(c.ctx, name)
	if err != nil {
		return nil, 0, err
	}
	defer rc.Close()
	counted := &countingReader{r: rc}
	info, err := imagebound.Inspect(counted)
	if err != nil {
		return nil, 0, err
	}
	size, known := inputSize(rc)
	if !known {
		if _, err := io.Copy(io.Discard, counted); err != nil {
			return nil, 0, err
		}
		size = counted.n
	}
	im, mask, n, err := loadCost(info)
	if err != nil {
		return nil, 0, err
	}
	return []any{im, mask}, readBufferBytes(size, known) + n, nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// loadCost is what decodeImage allocates for an image of this header: the
// decoder's raster, the IMAGE and MASK tensors, and their rotated copies
// when an EXIF orientation turns them. It refuses what decodeImage
// refuses for its size.
func loadCost(info imagebound.Info) (im, mask *tensor, n int64, err error) {
	if err := (imagebound.Limits{MaxPixels: maxTensorPixels}).Check(info); err != nil {
		return nil, nil, 0, bombError(info)
	}
	w, h := info.Width, info.Height
	if info.Orientation >= 5 {
		w, h = h, w
	}
	im = &tensor{b: 1, h: h, w: w, c: 3}
	mask = &tensor{b: 1, h: 64, w: 64, c: 1}
	if hasAlphaChannel(info) {
		mask = &tensor{b: 1, h: h, w: w, c: 1}
	}
	n = info.DecodeBytes + im.bytes() + mask.bytes()
	if info.Orientation > 1 {
		n += im.bytes() + mask.bytes()
	}
	return im, mask, n, nil
}
