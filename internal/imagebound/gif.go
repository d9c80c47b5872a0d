package imagebound

import (
	"bufio"
	"encoding/binary"
	"io"
)

// inspectGIF reads the logical screen and walks the blocks to the
// trailer, skipping each frame's data, to count the frames: a decoder that
// keeps every frame (or composites each onto the screen, as Pillow and so
// ComfyUI do) allocates screen × frames, and a GIF of thousands of 1×1
// frames is a few kilobytes.
func inspectGIF(r *bufio.Reader) (Info, error) {
	info := Info{Format: "gif"}
	var hdr [13]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return info, malformed("gif", "truncated header")
	}
	info.Width = int(binary.LittleEndian.Uint16(hdr[6:8]))
	info.Height = int(binary.LittleEndian.Uint16(hdr[8:10]))
	if info.Width == 0 || info.Height == 0 {
		return info, malformed("gif", "invalid dimensions")
	}
	if err := skipColorTable(r, hdr[10]); err != nil {
		return info, err
	}
	for {
		b, err := r.ReadByte()
		if err != nil {
			return info, malformed("gif", "no trailer")
		}
		switch b {
		case 0x21: // extension: label, then data sub-blocks
			if _, err := r.ReadByte(); err != nil {
				return info, malformed("gif", "truncated extension")
			}
			if err := skipSubBlocks(r); err != nil {
				return info, err
			}
		case 0x2C: // image descriptor, local colour table, LZW code size, data
			var d [9]byte
			if _, err := io.ReadFull(r, d[:]); err != nil {
				return info, malformed("gif", "truncated image descriptor")
			}
			if err := skipColorTable(r, d[8]); err != nil {
				return info, err
			}
			if _, err := r.ReadByte(); err != nil {
				return info, malformed("gif", "truncated image data")
			}
			if err := skipSubBlocks(r); err != nil {
				return info, err
			}
			info.Frames++
		case 0x3B: // trailer
			if info.Frames == 0 {
				return info, malformed("gif", "no image")
			}
			info.DecodeBytes = info.Pixels() + decoderOverhead
			return info, nil
		default:
			return info, malformed("gif", "unknown block")
		}
	}
}

// skipColorTable skips the colour table a packed-fields byte announces.
func skipColorTable(r *bufio.Reader, flags byte) error {
	if flags&0x80 == 0 {
		return nil
	}
	if err := skip(r, 3<<(1+flags&0x07)); err != nil {
		return malformed("gif", "truncated colour table")
	}
	return nil
}

func skipSubBlocks(r *bufio.Reader) error {
	for {
		n, err := r.ReadByte()
		if err != nil {
			return malformed("gif", "truncated data")
		}
		if n == 0 {
			return nil
		}
		if err := skip(r, int64(n)); err != nil {
			return malformed("gif", "truncated data")
		}
	}
}
