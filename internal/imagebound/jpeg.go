package imagebound

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"io"
)

// inspectJPEG reads the markers up to the first SOS: the SOF frame header,
// and an APP1 Exif block before it.
func inspectJPEG(r *bufio.Reader) (Info, error) {
	info := Info{Format: "jpeg", Frames: 1}
	if err := skip(r, 2); err != nil { // SOI
		return info, malformed("jpeg", "truncated")
	}
	var sof []byte
	exifSeen := false // only the first Exif APP1 counts
	for {
		marker, err := nextMarker(r)
		if err != nil {
			return info, malformed("jpeg", "no SOS marker")
		}
		switch {
		case marker == 0xD9: // EOI
			return info, malformed("jpeg", "no SOS marker")
		case marker >= 0xD0 && marker <= 0xD7, marker == 0x01: // RSTn, TEM: no length
			continue
		}
		var l [2]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return info, malformed("jpeg", "truncated segment")
		}
		n := int(binary.BigEndian.Uint16(l[:])) - 2
		if n < 0 {
			return info, malformed("jpeg", "short segment length")
		}
		switch {
		case marker == 0xDA: // SOS
			if sof == nil {
				return info, malformed("jpeg", "SOS before SOF")
			}
			info.DecodeBytes = jpegDecodeBytes(sof, info.Progressive)
			return info, nil
		case isSOF(marker):
			if sof != nil {
				return info, malformed("jpeg", "multiple SOF markers")
			}
			if marker != 0xC0 && marker != 0xC1 && marker != 0xC2 {
				return info, malformed("jpeg", "a coding process image/jpeg does not decode")
			}
			sof = make([]byte, n)
			if _, err := io.ReadFull(r, sof); err != nil {
				return info, malformed("jpeg", "truncated SOF")
			}
			if err := readSOF(sof, &info); err != nil {
				return info, err
			}
			info.Progressive = marker == 0xC2
			continue
		case marker == 0xE1 && !exifSeen:
			seg := make([]byte, n)
			if _, err := io.ReadFull(r, seg); err != nil {
				return info, malformed("jpeg", "truncated APP1")
			}
			if tiff, ok := bytes.CutPrefix(seg, []byte("Exif\x00\x00")); ok {
				exifSeen = true
				info.Orientation = exifOrientation(tiff)
			}
			continue
		}
		if err := skip(r, int64(n)); err != nil {
			return info, malformed("jpeg", "truncated segment")
		}
	}
}

// nextMarker skips to the next marker (fill bytes and stray data are
// skipped, as image/jpeg does) and returns its code.
func nextMarker(r *bufio.Reader) (byte, error) {
	for {
		b, err := r.ReadByte()
		if err != nil {
			return 0, err
		}
		if b != 0xFF {
			continue
		}
		for b == 0xFF {
			if b, err = r.ReadByte(); err != nil {
				return 0, err
			}
		}
		if b != 0 { // FF00 is stuffed data, not a marker
			return b, nil
		}
	}
}

// isSOF reports whether a marker is one of the SOFn (C0..CF except DHT,
// JPG and DAC).
func isSOF(m byte) bool {
	return m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC
}

func readSOF(sof []byte, info *Info) error {
	if len(sof) < 6 {
		return malformed("jpeg", "short SOF")
	}
	info.Height = int(binary.BigEndian.Uint16(sof[1:3]))
	info.Width = int(binary.BigEndian.Uint16(sof[3:5]))
	info.Components = int(sof[5])
	switch {
	case sof[0] != 8:
		return malformed("jpeg", "a precision image/jpeg does not decode")
	case info.Width == 0 || info.Height == 0:
		return malformed("jpeg", "invalid dimensions")
	case info.Components != 1 && info.Components != 3 && info.Components != 4:
		return malformed("jpeg", "a component count image/jpeg does not decode")
	case len(sof) != 6+3*info.Components:
		return malformed("jpeg", "SOF has wrong length")
	}
	for i := 0; i < info.Components; i++ {
		h, v := sof[7+3*i]>>4, sof[7+3*i]&0x0F
		if h < 1 || h > 4 || v < 1 || v > 4 {
			return malformed("jpeg", "bad sampling factors")
		}
	}
	return nil
}

// jpegDecodeBytes is what image/jpeg allocates for a frame header: the
// raster, padded to whole MCUs (Gray for one component, YCbCr at the
// chroma subsampling for three or four, plus a black plane for four), the
// RGBA or CMYK raster a conversion returns (RGB JPEGs and every
// four-component one; as an APP14 marker after the first scan can still
// make a three-component file RGB, every three-component file is charged
// for it), and for a progressive file 256 bytes of coefficients per 8×8
// block of every component.
func jpegDecodeBytes(sof []byte, progressive bool) int64 {
	n := int(sof[5])
	hv := func(i int) (int64, int64) { return int64(sof[7+3*i] >> 4), int64(sof[7+3*i] & 0x0F) }
	w, h := int64(binary.BigEndian.Uint16(sof[3:5])), int64(binary.BigEndian.Uint16(sof[1:3]))
	h0, v0 := int64(1), int64(1)
	if n > 1 {
		h0, v0 = hv(0)
	}
	mxx, myy := (w+8*h0-1)/(8*h0), (h+8*v0-1)/(8*v0)
	pw, ph := 8*h0*mxx, 8*v0*myy // the padded raster
	total := pw * ph             // luma (or gray)
	if n > 1 {
		h1, v1 := hv(1)
		cw, ch := pw, ph
		if hr := h0 / h1; hr > 1 {
			cw = (pw + hr - 1) / hr
		}
		if vr := v0 / v1; vr > 1 {
			ch = (ph + vr - 1) / vr
		}
		total += 2 * cw * ch // Cb, Cr
		total += 4 * w * h   // the RGBA/CMYK result of a conversion
		if n == 4 {
			h3, v3 := hv(3)
			total += 8 * h3 * mxx * 8 * v3 * myy // black
		}
	}
	if progressive {
		for i := 0; i < n; i++ {
			hi, vi := int64(1), int64(1)
			if n > 1 {
				hi, vi = hv(i)
			}
			total += 256 * mxx * myy * hi * vi
		}
	}
	return total + decoderOverhead
}
