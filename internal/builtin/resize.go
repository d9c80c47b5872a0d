package builtin

import (
	"fmt"
	"math"
)

func runImageScale(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	method, w, h, center, err := scaleWidgets(c)
	if err != nil {
		return nil, err
	}
	if w == 0 && h == 0 {
		return []any{im}, nil
	}
	w, h = scaleTarget(im.W, im.H, w, h)
	out, err := commonUpscale(im, w, h, method, center)
	if err != nil {
		return nil, err
	}
	return []any{out}, nil
}

// scaleWidgets reads ImageScale's widgets: the method, the size (either
// may be 0) and whether to crop to the center.
func scaleWidgets(c *nodeCall) (method string, w, h int, center bool, err error) {
	if method, err = c.comboValue("upscale_method"); err != nil {
		return
	}
	if w, err = c.intValue("width"); err != nil {
		return
	}
	if h, err = c.intValue("height"); err != nil {
		return
	}
	cropMode, err := c.comboValue("crop")
	return method, w, h, cropMode == "center", err
}

func runImageScaleBy(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	method, s, err := scaleByWidgets(c)
	if err != nil {
		return nil, err
	}
	w, h := scaleByTarget(im.W, im.H, s)
	out, err := commonUpscale(im, w, h, method, false)
	if err != nil {
		return nil, err
	}
	return []any{out}, nil
}

// scaleTarget is ImageScale's size for a width and height widget of which
// one may be 0 (not both): one zero keeps the aspect ratio, Python's
// round() (half to even) of the float64 quotient, at least 1.
func scaleTarget(imW, imH, w, h int) (int, int) {
	if w == 0 {
		w = max(1, int(math.RoundToEven(float64(imW)*float64(h)/float64(imH))))
	} else if h == 0 {
		h = max(1, int(math.RoundToEven(float64(imH)*float64(w)/float64(imW))))
	}
	return w, h
}

// scaleByWidgets reads ImageScaleBy's widgets.
func scaleByWidgets(c *nodeCall) (method string, s float64, err error) {
	if method, err = c.comboValue("upscale_method"); err != nil {
		return
	}
	s, err = c.floatValue("scale_by")
	return method, s, err
}

// scaleByTarget is ImageScaleBy's size.
func scaleByTarget(imW, imH int, s float64) (int, int) {
	return int(math.RoundToEven(float64(imW) * s)), int(math.RoundToEven(float64(imH) * s))
}

// commonUpscale is comfy.utils.common_upscale for IMAGE tensors: an
// optional center crop to the target aspect ratio, then torch's
// F.interpolate (nearest-exact, bilinear, area, bicubic; align_corners
// False, no antialiasing) or Pillow's LANCZOS on 8-bit data.
func commonUpscale(im *Image, w, h int, method string, centerCrop bool) (*Image, error) {
	if err := checkUpscale(im.B, w, h); err != nil {
		return nil, err
	}
	src := im
	if centerCrop {
		if x, y := centerCropOffsets(im.W, im.H, w, h); x != 0 || y != 0 {
			src = subImage(im, x, y, im.W-2*x, im.H-2*y)
		}
	}
	switch method {
	case "nearest-exact":
		return resizeNearestExact(src, w, h), nil
	case "bilinear":
		return resizeBilinear(src, w, h), nil
	case "area":
		return resizeArea(src, w, h), nil
	case "bicubic":
		return resizeBicubic(src, w, h), nil
	case "lanczos":
		return resizeLanczos(src, w, h), nil
	}
	return nil, fmt.Errorf("unknown upscale method %q", method)
}

func checkUpscale(b, w, h int) error {
	if w <= 0 || h <= 0 {
		//lint:ignore ST1005 torch's own message, word for word: clients match ComfyUI's errors
		return fmt.Errorf("Input and output sizes should be greater than 0, but got output (H: %d, W: %d)", h, w)
	}
	if int64(b)*int64(w)*int64(h) > maxTensorPixels {
		return fmt.Errorf("image tensor of %d×%d×%d pixels exceeds the limit of %d pixels", b, h, w, maxTensorPixels)
	}
	return nil
}

// centerCropOffsets is common_upscale's center crop of a imW×imH image to
// the aspect ratio of w×h: the columns (x) or rows (y) cut on each side.
func centerCropOffsets(imW, imH, w, h int) (x, y int) {
	oldAspect := float64(imW) / float64(imH)
	newAspect := float64(w) / float64(h)
	if oldAspect > newAspect {
		x = int(math.RoundToEven((float64(imW) - float64(imW)*(newAspect/oldAspect)) / 2))
	} else if oldAspect < newAspect {
		y = int(math.RoundToEven((float64(imH) - float64(imH)*(oldAspect/newAspect)) / 2))
	}
	return x, y
}

// scaleOf is torch's area_pixel_compute_scale without align_corners: the
// float32 ratio input/output.
func scaleOf(in, out int) float32 { return float32(in) / float32(out) }

// nearestExactIndex is torch's nearest_neighbor_exact_compute_source_index.
func nearestExactIndex(scale float32, dst, inSize int) int {
	return min(int(math.Floor(float64(float32((float64(dst)+0.5)*float64(scale))))), inSize-1)
}

func resizeNearestExact(im *Image, w, h int) *Image {
	sh, sw := scaleOf(im.H, h), scaleOf(im.W, w)
	xs := make([]int, w)
	for x := range xs {
		xs[x] = nearestExactIndex(sw, x, im.W)
	}
	ys := make([]int, h)
	for y := range ys {
		ys[y] = nearestExactIndex(sh, y, im.H)
	}
	return remap(im, h, w, func(y, x int) (int, int) { return ys[y], xs[x] })
}

// linearTap is one output coordinate's two source indices and weights,
// computed as torch's compute_source_index_and_lambda does in float32.
type linearTap struct {
	i0, i1 int
	l0, l1 float32
}

func linearTaps(in, out int) []linearTap {
	taps := make([]linearTap, out)
	scale := scaleOf(in, out)
	for o := range taps {
		if in == out {
			taps[o] = linearTap{i0: o, i1: o, l0: 1, l1: 0}
			continue
		}
		real := float32(scale*(float32(o)+0.5)) - 0.5
		if real < 0 {
			real = 0
		}
		i0 := min(int(math.Floor(float64(real))), in-1)
		l1 := min(max(real-float32(i0), 0), 1)
		i1 := i0
		if i0 < in-1 {
			i1++
		}
		taps[o] = linearTap{i0: i0, i1: i1, l0: 1 - l1, l1: l1}
	}
	return taps
}

// resizeBilinear follows torch's channels-last bilinear kernel (ComfyUI's
// movedim makes the tensor channels-last): four float32 products summed
// left to right with weights wy*wx.
func resizeBilinear(im *Image, w, h int) *Image {
	ty, tx := linearTaps(im.H, h), linearTaps(im.W, w)
	out := &Image{B: im.B, H: h, W: w, C: im.C, Pix: make([]float32, im.B*h*w*im.C)}
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		for y, vy := range ty {
			for x, vx := range tx {
				w00, w01 := float32(vy.l0*vx.l0), float32(vy.l0*vx.l1)
				w10, w11 := float32(vy.l1*vx.l0), float32(vy.l1*vx.l1)
				p00, p01 := (vy.i0*im.W+vx.i0)*im.C, (vy.i0*im.W+vx.i1)*im.C
				p10, p11 := (vy.i1*im.W+vx.i0)*im.C, (vy.i1*im.W+vx.i1)*im.C
				d := (y*w + x) * im.C
				for ch := 0; ch < im.C; ch++ {
					s := float32(in[p00+ch]*w00) + float32(in[p01+ch]*w01)
					s = float32(s) + float32(in[p10+ch]*w10)
					dst[d+ch] = float32(s) + float32(in[p11+ch]*w11)
				}
			}
		}
	}
	return out
}

// resizeArea is adaptive_avg_pool2d: each output pixel averages the input
// window [floor(o*in/out), ceil((o+1)*in/out)), summed in float32 row by
// row and divided by the window's size.
func resizeArea(im *Image, w, h int) *Image {
	out := &Image{B: im.B, H: h, W: w, C: im.C, Pix: make([]float32, im.B*h*w*im.C)}
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		for oy := 0; oy < h; oy++ {
			y0, y1 := oy*im.H/h, ((oy+1)*im.H+h-1)/h
			for ox := 0; ox < w; ox++ {
				x0, x1 := ox*im.W/w, ((ox+1)*im.W+w-1)/w
				n := float32((y1 - y0) * (x1 - x0))
				d := (oy*w + ox) * im.C
				for ch := 0; ch < im.C; ch++ {
					var s float32
					for y := y0; y < y1; y++ {
						for x := x0; x < x1; x++ {
							s = float32(s + in[(y*im.W+x)*im.C+ch])
						}
					}
					dst[d+ch] = s / n
				}
			}
		}
	}
	return out
}

// cubicTap is one output coordinate's four clamped source indices and
// weights (torch's compute_indices_weights_cubic, A = -0.75).
type cubicTap struct {
	idx [4]int
	wt  [4]float32
}

func cubicConv1(x, a float32) float32 {
	return float32(float32(float32(float32(float32(float32(a+2)*x)-(a+3))*x)*x) + 1)
}

func cubicConv2(x, a float32) float32 {
	return float32(float32(float32(float32(float32(float32(a*x)-5*a)*x)+8*a)*x) - 4*a)
}

func cubicTaps(in, out int) []cubicTap {
	const a = float32(-0.75)
	taps := make([]cubicTap, out)
	scale := scaleOf(in, out)
	for o := range taps {
		real := float32(scale*(float32(o)+0.5)) - 0.5 // no clamp at 0 for cubic
		i := min(int(math.Floor(float64(real))), in-1)
		t := min(max(real-float32(i), 0), 1)
		var tp cubicTap
		tp.wt = [4]float32{cubicConv2(t+1, a), cubicConv1(t, a), cubicConv1(1-t, a), cubicConv2(float32(1-t)+1, a)}
		for j := 0; j < 4; j++ {
			tp.idx[j] = max(min(i-1+j, in-1), 0)
		}
		taps[o] = tp
	}
	return taps
}

// resizeBicubic is torch's upsample_bicubic2d (align_corners False): rows
// are interpolated first, then the four row results, each sum accumulated
// in order. Results are not clamped, exactly as in ComfyUI, so values may
// leave 0..1 until SaveImage clips them.
func resizeBicubic(im *Image, w, h int) *Image {
	ty, tx := cubicTaps(im.H, h), cubicTaps(im.W, w)
	out := &Image{B: im.B, H: h, W: w, C: im.C, Pix: make([]float32, im.B*h*w*im.C)}
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		for y, vy := range ty {
			for x, vx := range tx {
				d := (y*w + x) * im.C
				for ch := 0; ch < im.C; ch++ {
					var acc float32
					for j := 0; j < 4; j++ {
						row := vy.idx[j] * im.W
						var t float32
						for k := 0; k < 4; k++ {
							t = float32(t + float32(in[(row+vx.idx[k])*im.C+ch]*vx.wt[k]))
						}
						acc = float32(acc + float32(t*vy.wt[j]))
					}
					dst[d+ch] = acc
				}
			}
		}
	}
	return out
}
