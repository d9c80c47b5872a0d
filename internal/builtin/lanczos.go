package builtin

import "math"

// ComfyUI's "lanczos" is not a torch mode: comfy.utils.lanczos converts each
// frame to 8 bits (clip(255*x) truncated), resizes it with Pillow's
// Image.resize(LANCZOS) and divides by 255 again. resizeLanczos reproduces
// Pillow's 8-bit two-pass resampler (Resample.c): float64 filter weights
// normalised per output pixel, converted to 22-bit fixed point, integer
// accumulation with rounding, horizontal pass first. Even at the same size
// the 8-bit round trip quantises the image, as it does in ComfyUI.

const (
	lanczosSupport = 3.0
	precisionBits  = 32 - 8 - 2
)

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	x *= math.Pi
	return math.Sin(x) / x
}

func lanczosFilter(x float64) float64 {
	if -lanczosSupport <= x && x < lanczosSupport {
		return sinc(x) * sinc(x/3)
	}
	return 0
}

// fixedCoeffs holds, per output index, the first source index and the
// fixed-point weights of the source pixels it reads.
type fixedCoeffs struct {
	start []int
	k     [][]int32
}

// precomputeCoeffs mirrors Pillow's precompute_coeffs plus
// normalize_coeffs_8bpc for a box covering the whole input.
func precomputeCoeffs(inSize, outSize int) fixedCoeffs {
	scale := float64(inSize) / float64(outSize)
	filterScale := max(scale, 1.0)
	support := lanczosSupport * filterScale
	fc := fixedCoeffs{start: make([]int, outSize), k: make([][]int32, outSize)}
	for xx := 0; xx < outSize; xx++ {
		center := (float64(xx) + 0.5) * scale
		ss := 1.0 / filterScale
		xmin := max(int(center-support+0.5), 0)
		xmax := min(int(center+support+0.5), inSize) - xmin
		w := make([]float64, max(xmax, 0))
		ww := 0.0
		for x := range w {
			w[x] = lanczosFilter((float64(x+xmin) - center + 0.5) * ss)
			ww += w[x]
		}
		k := make([]int32, len(w))
		for x := range w {
			if ww != 0 {
				w[x] /= ww
			}
			if w[x] < 0 {
				k[x] = int32(-0.5 + w[x]*(1<<precisionBits))
			} else {
				k[x] = int32(0.5 + w[x]*(1<<precisionBits))
			}
		}
		fc.start[xx], fc.k[xx] = xmin, k
	}
	return fc
}

func clip8(v int64) uint8 {
	if v >= 1<<precisionBits<<8 {
		return 255
	}
	if v <= 0 {
		return 0
	}
	return uint8(v >> precisionBits)
}

// resample8 runs one pass over an 8-bit RGB plane of size w×h into dst,
// producing either a new width (horizontal) or a new height.
func resample8(src []uint8, w, h int, fc fixedCoeffs, horizontal bool, dst []uint8) []uint8 {
	ow, oh := w, h
	if horizontal {
		ow = len(fc.k)
	} else {
		oh = len(fc.k)
	}
	dst = dst[:ow*oh*3]
	for y := 0; y < oh; y++ {
		for x := 0; x < ow; x++ {
			for ch := 0; ch < 3; ch++ {
				acc := int64(1) << (precisionBits - 1)
				if horizontal {
					for i, k := range fc.k[x] {
						acc += int64(src[(y*w+fc.start[x]+i)*3+ch]) * int64(k)
					}
				} else {
					for i, k := range fc.k[y] {
						acc += int64(src[((fc.start[y]+i)*w+x)*3+ch]) * int64(k)
					}
				}
				dst[(y*ow+x)*3+ch] = clip8(acc)
			}
		}
	}
	return dst
}

// lanczosScratch is the size of resizeLanczos's 8-bit planes for a sw×sh
// source and a w×h result: the source's, and each pass's result, reused
// from frame to frame.
func lanczosScratch(sw, sh, w, h int) int64 {
	n := 3 * int64(sw) * int64(sh)
	if w != sw {
		n += 3 * int64(w) * int64(sh)
	}
	if h != sh {
		n += 3 * int64(w) * int64(h)
	}
	return n
}

func resizeLanczos(im *Image, w, h int) *Image {
	out := &Image{B: im.B, H: h, W: w, C: 3, Pix: make([]float32, im.B*h*w*3)}
	horiz, vert := precomputeCoeffs(im.W, w), precomputeCoeffs(im.H, h)
	plane := make([]uint8, im.H*im.W*3)
	var hPass, vPass []uint8
	if w != im.W {
		hPass = make([]uint8, w*im.H*3)
	}
	if h != im.H {
		vPass = make([]uint8, w*h*3)
	}
	for b := 0; b < im.B; b++ {
		in := im.frame(b)
		for y := 0; y < im.H; y++ {
			for x := 0; x < im.W; x++ {
				for ch := 0; ch < 3; ch++ {
					plane[(y*im.W+x)*3+ch] = toUint8(in[(y*im.W+x)*im.C+ch])
				}
			}
		}
		cur, pw := plane, im.W
		if w != pw {
			cur, pw = resample8(cur, pw, im.H, horiz, true, hPass), w
		}
		if h != im.H {
			cur = resample8(cur, pw, im.H, vert, false, vPass)
		}
		dst := out.frame(b)
		for i, v := range cur {
			dst[i] = fromUint8(v)
		}
	}
	return out
}
