// Package bombs builds decompression bombs for tests: valid PNG, JPEG and
// GIF files of black pixels that are kilobytes to megabytes on disk and
// gigabytes once decoded. They are built in memory in milliseconds (the
// deflate stream repeats one compressed segment; a JPEG block costs two
// bits), so no test commits one. It is never linked into the product.
package bombs

import (
	"bytes"
	"compress/flate"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/gif"
	"runtime"
)

// PNG is a w×h PNG of zeros with IHDR's colour type and bit depth, Adam7
// interlaced when interlaced is set. A 30000×30000 8-bit gray one is about
// 875 KB.
func PNG(w, h int, colorType, bitDepth uint8, interlaced bool) []byte {
	var out bytes.Buffer
	out.WriteString("\x89PNG\r\n\x1a\n")
	ihdr := make([]byte, 13)
	binary.BigEndian.PutUint32(ihdr[0:], uint32(w))
	binary.BigEndian.PutUint32(ihdr[4:], uint32(h))
	ihdr[8], ihdr[9] = bitDepth, colorType
	if interlaced {
		ihdr[12] = 1
	}
	writeChunk(&out, "IHDR", ihdr)
	if colorType == 3 {
		writeChunk(&out, "PLTE", []byte{0, 0, 0})
	}
	writeChunk(&out, "IDAT", zlibZeros(rawSize(w, h, bitsPerPixel(colorType, bitDepth), interlaced)))
	writeChunk(&out, "IEND", nil)
	return out.Bytes()
}

func bitsPerPixel(colorType, depth uint8) int {
	return map[uint8]int{0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[colorType] * int(depth)
}

// rawSize is the length of the filtered scanlines: one filter byte per
// row, per pass when interlaced (all zero: filter None, black pixels).
func rawSize(w, h, bits int, interlaced bool) int64 {
	row := func(w int) int64 { return 1 + (int64(w)*int64(bits)+7)/8 }
	if !interlaced {
		return int64(h) * row(w)
	}
	passes := [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}}
	var n int64
	for _, p := range passes {
		pw, ph := (w-p[0]+p[2]-1)/p[2], (h-p[1]+p[3]-1)/p[3]
		if pw > 0 && ph > 0 {
			n += int64(ph) * row(pw)
		}
	}
	return n
}

func writeChunk(w *bytes.Buffer, typ string, data []byte) {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(data)))
	w.Write(n[:])
	crc := crc32.NewIEEE()
	crc.Write([]byte(typ))
	crc.Write(data)
	w.WriteString(typ)
	w.Write(data)
	binary.BigEndian.PutUint32(n[:], crc.Sum32())
	w.Write(n[:])
}

// zlibZeros is a zlib stream of n zero bytes. Deflate back-references may
// reach into earlier blocks, and every earlier byte is a zero, so one
// segment that compresses segment zeros and ends on a sync flush can be
// repeated as is; a final block carries the rest.
func zlibZeros(n int64) []byte {
	const segment = 1 << 20
	var seg, tail bytes.Buffer
	fw, _ := flate.NewWriter(&seg, flate.BestCompression)
	fw.Write(make([]byte, segment))
	fw.Flush()
	fw, _ = flate.NewWriter(&tail, flate.BestCompression)
	fw.Write(make([]byte, n%segment))
	fw.Close()
	var out bytes.Buffer
	out.Write([]byte{0x78, 0xDA})
	for i := int64(0); i < n/segment; i++ {
		out.Write(seg.Bytes())
	}
	out.Write(tail.Bytes())
	// Adler-32 of n zeros: s1 stays 1, s2 adds 1 per byte.
	var sum [4]byte
	binary.BigEndian.PutUint32(sum[:], uint32(n%65521)<<16|1)
	out.Write(sum[:])
	return out.Bytes()
}

// JPEG is a w×h JPEG of black pixels, gray (components 1) or YCbCr 4:4:4
// (3), baseline or progressive (one DC scan). Its Huffman tables give the
// only DC and AC symbols a one-bit code, so a block costs two bits (one in
// a progressive DC scan): 30000×30000 gray is 3.5 MB.
func JPEG(w, h, components int, progressive bool) []byte {
	var out bytes.Buffer
	out.Write([]byte{0xFF, 0xD8})
	segment(&out, 0xDB, append([]byte{0x00}, bytes.Repeat([]byte{1}, 64)...)) // DQT
	sof := []byte{8, byte(h >> 8), byte(h), byte(w >> 8), byte(w), byte(components)}
	for i := 1; i <= components; i++ {
		sof = append(sof, byte(i), 0x11, 0)
	}
	marker := byte(0xC0)
	if progressive {
		marker = 0xC2
	}
	segment(&out, marker, sof)
	oneCode := func(class byte) []byte { // one code of length 1 for symbol 0
		t := make([]byte, 1+16+1)
		t[0], t[1] = class, 1
		return t
	}
	segment(&out, 0xC4, oneCode(0x00)) // DC table 0: category 0
	segment(&out, 0xC4, oneCode(0x10)) // AC table 0: end of block
	sos := []byte{byte(components)}
	for i := 1; i <= components; i++ {
		sos = append(sos, byte(i), 0x00)
	}
	bitsPerBlock := int64(2)
	if progressive {
		sos = append(sos, 0, 0, 0) // Ss=0 Se=0: the DC coefficients
		bitsPerBlock = 1
	} else {
		sos = append(sos, 0, 63, 0)
	}
	segment(&out, 0xDA, sos)
	blocks := int64((w+7)/8) * int64((h+7)/8) * int64(components)
	out.Write(make([]byte, (blocks*bitsPerBlock+7)/8))
	out.Write([]byte{0xFF, 0xD9})
	return out.Bytes()
}

func segment(w *bytes.Buffer, marker byte, data []byte) {
	w.Write([]byte{0xFF, marker, byte((len(data) + 2) >> 8), byte(len(data) + 2)})
	w.Write(data)
}

// GIF is a GIF with a w×h logical screen and frames 1×1 frames: a few
// bytes per frame, w×h pixels per frame to a decoder that composites
// frames onto the screen.
func GIF(w, h, frames int) []byte {
	pal := color.Palette{color.Black, color.White}
	var one bytes.Buffer
	_ = gif.EncodeAll(&one, &gif.GIF{
		Image:  []*image.Paletted{image.NewPaletted(image.Rect(0, 0, 1, 1), pal)},
		Delay:  []int{0},
		Config: image.Config{ColorModel: pal, Width: w, Height: h},
	})
	b := one.Bytes()
	// Header and logical screen with its 2-colour table, then one frame
	// (graphic control extension, descriptor, data), then the trailer.
	head := 13 + 6
	frame := b[head : len(b)-1]
	var out bytes.Buffer
	out.Write(b[:head])
	for range frames {
		out.Write(frame)
	}
	out.WriteByte(0x3B)
	return out.Bytes()
}

// HeapAllocated is what f allocates on the heap (runtime.MemStats'
// TotalAlloc, from a collection before f): garbage included, so at least
// the most f held at once.
func HeapAllocated(f func()) int64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return int64(after.TotalAlloc - before.TotalAlloc)
}
