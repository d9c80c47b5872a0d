package imagebound

import (
	"bufio"
	"encoding/binary"
	"io"
	"math"
)

const pngSignature = "\x89PNG\r\n\x1a\n"

// maxExifBytes bounds the EXIF block Inspect keeps to read the orientation
// from; a larger one is skipped (a JPEG APP1 holds at most 64 KiB).
const maxExifBytes = 1 << 20

// inspectPNG reads the signature, IHDR and the chunks before the first
// IDAT (where tRNS and eXIf must be).
func inspectPNG(r *bufio.Reader) (Info, error) {
	info := Info{Format: "png", Frames: 1}
	exifSeen := false // only the first eXIf counts
	if err := skip(r, int64(len(pngSignature))); err != nil {
		return info, malformed("png", "truncated")
	}
	var hdr [8]byte
	for first := true; ; first = false {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return info, malformed("png", "no IDAT chunk")
		}
		length, typ := binary.BigEndian.Uint32(hdr[:4]), string(hdr[4:])
		if length > 0x7fffffff {
			return info, malformed("png", "bad chunk length")
		}
		if first != (typ == "IHDR") {
			return info, malformed("png", "IHDR is not the first chunk")
		}
		switch typ {
		case "IHDR":
			if err := readIHDR(r, length, &info); err != nil {
				return info, err
			}
			continue // its CRC was read with it
		case "IDAT":
			info.DecodeBytes = pngDecodeBytes(info)
			return info, nil
		case "IEND":
			return info, malformed("png", "no IDAT chunk")
		case "tRNS":
			info.Transparency = true
		case "eXIf":
			if !exifSeen && length <= maxExifBytes {
				exifSeen = true
				b := make([]byte, length)
				if _, err := io.ReadFull(r, b); err != nil {
					return info, malformed("png", "truncated eXIf")
				}
				info.Orientation = exifOrientation(b)
				length = 0
			}
		}
		if err := skip(r, int64(length)+4); err != nil { // data and CRC
			return info, malformed("png", "truncated chunk "+typ)
		}
	}
}

func readIHDR(r *bufio.Reader, length uint32, info *Info) error {
	if length != 13 {
		return malformed("png", "bad IHDR length")
	}
	var b [13 + 4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return malformed("png", "truncated IHDR")
	}
	w, h := binary.BigEndian.Uint32(b[0:4]), binary.BigEndian.Uint32(b[4:8])
	if w == 0 || h == 0 || w > 0x7fffffff || h > 0x7fffffff {
		return malformed("png", "invalid dimensions")
	}
	info.Width, info.Height = int(w), int(h)
	info.BitDepth, info.ColorType = b[8], b[9]
	info.Interlaced = b[12] == 1
	if bitsPerPixel(info.ColorType, info.BitDepth) == 0 {
		return malformed("png", "bad colour type or bit depth")
	}
	return nil
}

// bitsPerPixel is a PNG row's bits per pixel, 0 for an invalid
// combination.
func bitsPerPixel(colorType, depth uint8) int {
	switch {
	case colorType == 0 && (depth == 1 || depth == 2 || depth == 4 || depth == 8 || depth == 16):
		return int(depth)
	case colorType == 3 && (depth == 1 || depth == 2 || depth == 4 || depth == 8):
		return int(depth)
	case depth != 8 && depth != 16:
		return 0
	case colorType == 2:
		return 3 * int(depth)
	case colorType == 4:
		return 2 * int(depth)
	case colorType == 6:
		return 4 * int(depth)
	}
	return 0
}

// pngDecodeBytes is what image/png allocates: the raster in the type it
// returns for the colour type (gray and truecolour with a tRNS chunk
// become NRGBA), two rows of filter state, and for Adam7 a raster per pass
// on top of the full one (the passes together are as large as the image).
func pngDecodeBytes(info Info) int64 {
	var bpp int64 // bytes per pixel of the decoded raster
	wide := info.BitDepth == 16
	switch info.ColorType {
	case 0: // gray: Gray, Gray16, or NRGBA(64) with tRNS
		bpp = 1
		if wide {
			bpp = 2
		}
		if info.Transparency {
			bpp = 4
			if wide {
				bpp = 8
			}
		}
	case 3: // palette: Paletted
		bpp = 1
	default: // RGB, gray+alpha, RGBA: (N)RGBA or (N)RGBA64
		bpp = 4
		if wide {
			bpp = 8
		}
	}
	// IHDR allows 2³¹-1 × 2³¹-1 pixels, whose raster does not fit an
	// int64: such a header costs "everything", not a wrapped-around
	// negative that would pass any bound.
	pixels := int64(info.Width) * int64(info.Height) // < 2⁶²
	if pixels > (math.MaxInt64-decoderOverhead)/(4*bpp) {
		return math.MaxInt64
	}
	raster := bpp * pixels
	rows := 2 * (1 + (int64(bitsPerPixel(info.ColorType, info.BitDepth))*int64(info.Width)+7)/8)
	if info.Interlaced {
		raster *= 2
		rows *= 2
	}
	return raster + rows + decoderOverhead
}

// decoderOverhead covers a decoder's fixed state (zlib window, Huffman
// tables, buffered reader).
const decoderOverhead = 128 << 10
