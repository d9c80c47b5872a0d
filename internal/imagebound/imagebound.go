// Package imagebound tells from an image's header what decoding it will
// cost, so that a caller refuses a decompression bomb before anything is
// allocated. A few hundred kilobytes of PNG can claim 50000×50000 pixels,
// and Go's decoders allocate the whole raster as soon as they have read the
// header: the size of the file says nothing about the size of the image.
//
// Inspect reads a PNG, JPEG or GIF header (never the pixel data) and
// returns an Info whose DecodeBytes is what image/png or image/jpeg
// allocates for that file: the raster in the type the decoder returns, the
// passes of an interlaced PNG, the coefficients of a progressive JPEG, the
// second raster of a colour conversion. Limits.Check refuses an Info over a
// bound; Decode does both and then decodes.
//
// What the decoders read past the header costs time, not memory: image/png
// reads exactly the rows IHDR announces and fails on one byte more ("too
// much pixel data"), so an IDAT stream that inflates to gigabytes behind
// small dimensions is refused without being inflated; image/jpeg decodes
// its scans into the raster it allocated from SOF.
package imagebound

import (
	"bufio"
	"errors"
	"fmt"
	"image"
	"image/jpeg"
	"image/png"
	"io"

	"github.com/dustin/go-humanize"
)

// Info is what an image's header says.
type Info struct {
	// Format is "png", "jpeg" or "gif".
	Format        string
	Width, Height int
	// Frames is how many images the file holds: a GIF's image
	// descriptors; 1 for PNG (an APNG's other frames are not decoded) and
	// JPEG.
	Frames int
	// DecodeBytes bounds what Go's decoder allocates for the file (see the
	// package comment). For GIF, which no decoder here reads, it is one
	// byte per pixel of every frame.
	DecodeBytes int64
	// Orientation is the EXIF orientation tag (1..8) of a JPEG APP1 or PNG
	// eXIf header, 0 when there is none.
	Orientation int

	// PNG: IHDR's bit depth and colour type, Adam7 interlacing, and
	// whether a tRNS chunk precedes the pixel data.
	BitDepth, ColorType uint8
	Interlaced          bool
	Transparency        bool

	// JPEG: the SOF's component count and whether it is progressive.
	Components  int
	Progressive bool
}

// Pixels is width × height × frames.
func (i Info) Pixels() int64 {
	return int64(i.Width) * int64(i.Height) * int64(max(i.Frames, 1))
}

// Limits bound a decode. Zero fields do not bound.
type Limits struct {
	// MaxPixels bounds width × height × frames.
	MaxPixels int64
	// MaxBytes bounds DecodeBytes.
	MaxBytes int64
}

// Check refuses an image over the limits with a *TooLargeError.
func (l Limits) Check(info Info) error {
	if (l.MaxPixels > 0 && info.Pixels() > l.MaxPixels) || (l.MaxBytes > 0 && info.DecodeBytes > l.MaxBytes) {
		return &TooLargeError{Info: info, Limits: l}
	}
	return nil
}

// TooLargeError is an image whose decode the limits refuse.
type TooLargeError struct {
	Info   Info
	Limits Limits
}

func (e *TooLargeError) Error() string {
	i := e.Info
	desc := fmt.Sprintf("a %d×%d %s", i.Width, i.Height, formatName(i.Format))
	if i.Frames > 1 {
		desc += fmt.Sprintf(" of %d frames", i.Frames)
	}
	if e.Limits.MaxPixels > 0 && i.Pixels() > e.Limits.MaxPixels {
		return fmt.Sprintf("%s has %d pixels, over the limit of %d", desc, i.Pixels(), e.Limits.MaxPixels)
	}
	return fmt.Sprintf("%s takes %s to decode, over the limit of %s", desc,
		humanize.IBytes(uint64(i.DecodeBytes)), humanize.IBytes(uint64(e.Limits.MaxBytes)))
}

func formatName(f string) string {
	switch f {
	case "png":
		return "PNG"
	case "jpeg":
		return "JPEG"
	case "gif":
		return "GIF"
	}
	return f
}

// ErrFormat is a file that is not a PNG, JPEG or GIF, or whose header is
// malformed; the error wrapping it says which.
var ErrFormat = errors.New("imagebound: not a PNG, JPEG or GIF image")

// ErrUnsupported is an image Decode has no decoder for (GIF: the gateway
// links none).
var ErrUnsupported = errors.New("imagebound: no decoder for this image format")

func malformed(format, msg string) error {
	return fmt.Errorf("%w: %s: %s", ErrFormat, format, msg)
}

// Inspect reads an image's header from r. It reads no further than the
// start of the pixel data (for GIF, it skips every frame's data to count
// the frames) and allocates nothing in proportion to the image.
func Inspect(r io.Reader) (Info, error) {
	br, ok := r.(*bufio.Reader)
	if !ok {
		br = bufio.NewReaderSize(r, 4096)
	}
	magic, err := br.Peek(8)
	if err != nil && len(magic) < 3 {
		return Info{}, fmt.Errorf("%w: too short", ErrFormat)
	}
	switch {
	case len(magic) == 8 && string(magic) == pngSignature:
		return inspectPNG(br)
	case magic[0] == 0xFF && magic[1] == 0xD8:
		return inspectJPEG(br)
	case len(magic) >= 6 && (string(magic[:6]) == "GIF87a" || string(magic[:6]) == "GIF89a"):
		return inspectGIF(br)
	}
	return Info{}, ErrFormat
}

// Decode inspects the image that starts at r's offset, checks the limits,
// seeks back and decodes it with image/png or image/jpeg. The decoder's
// result has the inspected size.
func Decode(r io.ReadSeeker, l Limits) (image.Image, Info, error) {
	start, err := r.Seek(0, io.SeekCurrent)
	if err != nil {
		return nil, Info{}, err
	}
	info, err := Inspect(r)
	if err != nil {
		return nil, info, err
	}
	if err := l.Check(info); err != nil {
		return nil, info, err
	}
	if _, err := r.Seek(start, io.SeekStart); err != nil {
		return nil, info, err
	}
	var im image.Image
	switch info.Format {
	case "png":
		im, err = png.Decode(r)
	case "jpeg":
		im, err = jpeg.Decode(r)
	default:
		return nil, info, fmt.Errorf("%w: %s", ErrUnsupported, info.Format)
	}
	if err != nil {
		return nil, info, fmt.Errorf("%w: %s: %v", ErrFormat, info.Format, err)
	}
	if b := im.Bounds(); b.Dx() != info.Width || b.Dy() != info.Height {
		return nil, info, malformed(info.Format, "the decoded size differs from the header's")
	}
	return im, info, nil
}

// skip discards n bytes of r (n is a chunk or segment length, below 2³¹).
func skip(r *bufio.Reader, n int64) error {
	_, err := r.Discard(int(n))
	return err
}
