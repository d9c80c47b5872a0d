package builtin

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"image"
	"image/png"
	"math/rand/v2"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
)

func runSaveImage(c *nodeCall) ([]any, error) {
	im, err := c.image("images")
	if err != nil {
		return nil, err
	}
	prefix, err := c.stringValue("filename_prefix")
	if err != nil {
		return nil, err
	}
	return nil, c.saveImages(im, prefix, "output", png.DefaultCompression)
}

// previewLetters is the alphabet of PreviewImage's random suffix, typo
// included ('p' twice, no 'w'), as in ComfyUI.
const previewLetters = "abcdefghijklmnopqrstupvxyz"

func runPreviewImage(c *nodeCall) ([]any, error) {
	im, err := c.image("images")
	if err != nil {
		return nil, err
	}
	suffix := make([]byte, 5)
	for i := range suffix {
		suffix[i] = previewLetters[rand.IntN(len(previewLetters))]
	}
	return nil, c.saveImages(im, "ComfyUI_temp_"+string(suffix), "temp", png.BestSpeed)
}

// saveImages is SaveImage.save_images: one PNG per frame named
// <prefix>_<counter:05>_.png, where a prefix may carry a subfolder and
// %width% %height% %year% %month% %day% %hour% %minute% %second%
// %batch_num%. The counter continues per subfolder/prefix within the job,
// standing in for ComfyUI's scan of the output folder. Each file is handed
// to OnOutput before the next is encoded.
func (c *nodeCall) saveImages(im *Image, prefix, typ string, level png.CompressionLevel) error {
	subfolder, base, err := splitPrefix(expandPrefixVars(prefix, im.W, im.H, time.Now()))
	if err != nil {
		return err
	}
	chunks, err := c.textChunks()
	if err != nil {
		return err
	}
	if c.run.env.JobPrefix != "" {
		subfolder = path.Join(c.run.env.JobPrefix, subfolder)
	}
	key := typ + "\x00" + subfolder + "\x00" + base
	counter := c.run.counters[key] + 1
	enc := png.Encoder{CompressionLevel: level}
	var text int64
	for _, ch := range chunks {
		text += int64(len(ch))
	}
	for b := 0; b < im.B; b++ {
		if err := c.ctx.Err(); err != nil {
			return err
		}
		if b > 0 {
			// The previous frame's raster, encoder and PNG are garbage: the
			// cost charged one frame.
			c.run.mem.budget.Dropped(saveFrameBytes(im.H, im.W, text))
		}
		// Sized for the largest PNG of the frame, so that it never grows
		// (and copies) as the encoder writes.
		buf := bytes.NewBuffer(make([]byte, 0, pngBound(im.H, im.W)+text))
		if err := enc.Encode(&withChunks{w: buf, chunks: chunks}, frameRGBA(im, b)); err != nil {
			return fmt.Errorf("encode png: %w", err)
		}
		name := fmt.Sprintf("%s_%05d_.png", strings.ReplaceAll(base, "%batch_num%", strconv.Itoa(b)), counter)
		out := Output{
			NodeID: c.id, Kind: "images", Filename: name, Subfolder: subfolder, Type: typ,
			ContentType: "image/png", Data: buf.Bytes(),
		}
		c.run.counters[key] = counter
		counter++
		if c.run.env.OnOutput != nil {
			if err := c.run.env.OnOutput(c.ctx, out); err != nil {
				return &deliveryError{fmt.Errorf("builtin: deliver output %s of node %s: %w", name, c.id, err)}
			}
		}
	}
	return nil
}

func expandPrefixVars(p string, w, h int, now time.Time) string {
	if !strings.Contains(p, "%") {
		return p
	}
	two := func(v int) string { return fmt.Sprintf("%02d", v) }
	return strings.NewReplacer(
		"%width%", strconv.Itoa(w), "%height%", strconv.Itoa(h),
		"%year%", strconv.Itoa(now.Year()), "%month%", two(int(now.Month())), "%day%", two(now.Day()),
		"%hour%", two(now.Hour()), "%minute%", two(now.Minute()), "%second%", two(now.Second()),
	).Replace(p)
}

// splitPrefix is os.path.normpath + dirname/basename with ComfyUI's refusal
// to write outside the output folder.
func splitPrefix(p string) (subfolder, base string, err error) {
	clean := path.Clean(strings.ReplaceAll(p, "\\", "/"))
	if path.IsAbs(clean) || clean == ".." || strings.HasPrefix(clean, "../") {
		//lint:ignore ST1005 ComfyUI's own message, word for word: clients match it
		return "", "", fmt.Errorf("Saving image outside the output folder is not allowed: %q", p)
	}
	subfolder, base = path.Split(clean)
	subfolder = strings.TrimSuffix(subfolder, "/")
	if base == "." {
		base = ""
	}
	return subfolder, base, nil
}

// frameRGBA converts a frame with SaveImage's clip-and-truncate; all pixels
// are opaque, so image/png writes 8-bit RGB like Pillow.
func frameRGBA(im *Image, b int) *image.RGBA {
	f := im.frame(b)
	rgba := image.NewRGBA(image.Rect(0, 0, im.W, im.H))
	for i, j := 0, 0; i < len(f); i, j = i+im.C, j+4 {
		rgba.Pix[j] = toUint8(f[i])
		rgba.Pix[j+1] = toUint8(f[i+1])
		rgba.Pix[j+2] = toUint8(f[i+2])
		rgba.Pix[j+3] = 255
	}
	return rgba
}

// textChunks builds the tEXt chunks SaveImage writes: "prompt" with the
// prompt JSON and one per extra_pnginfo entry (sorted by key), JSON with
// non-ASCII escaped as Python's json.dumps does, so tEXt stays Latin-1.
func (c *nodeCall) textChunks() ([][]byte, error) {
	var chunks [][]byte
	if c.run.env.PromptJSON != nil {
		chunks = append(chunks, textChunk("prompt", asciiJSON(c.run.env.PromptJSON)))
	}
	keys := make([]string, 0, len(c.run.env.ExtraPNGInfo))
	for k := range c.run.env.ExtraPNGInfo {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(c.run.env.ExtraPNGInfo[k]); err != nil {
			return nil, fmt.Errorf("extra_pnginfo %s: %w", k, err)
		}
		chunks = append(chunks, textChunk(k, asciiJSON(bytes.TrimRight(buf.Bytes(), "\n"))))
	}
	return chunks, nil
}

// asciiJSON escapes every non-ASCII rune of a JSON text as \uXXXX
// (surrogate pairs above the BMP). In valid JSON such runes occur only
// inside strings, where the escape means the same character.
func asciiJSON(b []byte) []byte {
	out := make([]byte, 0, asciiJSONLen(b))
	for _, r := range string(b) {
		if r < 0x80 {
			out = append(out, byte(r))
			continue
		}
		if r > 0xFFFF {
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
			continue
		}
		out = fmt.Appendf(out, `\u%04x`, r)
	}
	return out
}

// asciiJSONLen is the length of asciiJSON(b).
func asciiJSONLen(b []byte) int64 {
	var n int64
	for _, r := range string(b) {
		switch {
		case r < 0x80:
			n++
		case r > 0xFFFF:
			n += 12
		default:
			n += 6
		}
	}
	return n
}

// textChunk encodes a PNG tEXt chunk: length, type, keyword NUL text, CRC.
func textChunk(key string, text []byte) []byte {
	data := append(append([]byte(key), 0), text...)
	chunk := make([]byte, 8, 12+len(data))
	binary.BigEndian.PutUint32(chunk, uint32(len(data)))
	copy(chunk[4:], "tEXt")
	chunk = append(chunk, data...)
	return binary.BigEndian.AppendUint32(chunk, crc32.ChecksumIEEE(chunk[4:]))
}

// withChunks writes a PNG stream to w with chunks inserted right after
// IHDR (signature 8 bytes + IHDR 25 bytes), where Pillow writes its text
// chunks too.
type withChunks struct {
	w       *bytes.Buffer
	chunks  [][]byte
	written int
}

func (c *withChunks) Write(p []byte) (int, error) {
	const ihdrEnd = 8 + 25
	n := len(p)
	if c.written < ihdrEnd {
		head := p[:min(len(p), ihdrEnd-c.written)]
		c.w.Write(head)
		c.written += len(head)
		p = p[len(head):]
		if c.written == ihdrEnd {
			for _, ch := range c.chunks {
				c.w.Write(ch)
			}
		}
	}
	c.w.Write(p)
	return n, nil
}
