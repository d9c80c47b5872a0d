package builtin

import (
	"context"
	"fmt"
	"math"
)

var blendModes = []string{"normal", "multiply", "screen", "overlay", "soft_light", "difference"}

func runImageBlend(c *nodeCall) ([]any, error) {
	im1, err := c.image("image1")
	if err != nil {
		return nil, err
	}
	im2, err := c.image("image2")
	if err != nil {
		return nil, err
	}
	factor, err := c.floatValue("blend_factor")
	if err != nil {
		return nil, err
	}
	mode, err := c.comboValue("blend_mode")
	if err != nil {
		return nil, err
	}
	out, err := blend(im1, im2, factor, mode)
	if err != nil {
		return nil, err
	}
	return []any{out}, nil
}

// blend is ComfyUI's ImageBlend: image2 is resized (bicubic, center crop) to
// image1's size when their shapes differ, the mode is applied per element in
// float32, mixed as image1*(1-f) + blended*f and clamped to 0..1. Batches
// broadcast like torch: equal sizes, or one of them 1.
func blend(im1, im2 *Image, factor float64, mode string) (*Image, error) {
	if !im1.sameShape(im2) && (im1.H != im2.H || im1.W != im2.W) {
		var err error
		if im2, err = commonUpscale(im2, im1.W, im1.H, "bicubic", true); err != nil {
			return nil, err
		}
	}
	if im1.B != im2.B && im1.B != 1 && im2.B != 1 {
		return nil, fmt.Errorf("The size of tensor a (%d) must match the size of tensor b (%d) at non-singleton dimension 0", im1.B, im2.B)
	}
	out, err := newImage(max(im1.B, im2.B), im1.H, im1.W)
	if err != nil {
		return nil, err
	}
	keep, mix := float32(1-factor), float32(factor)
	for b := 0; b < out.B; b++ {
		p1, p2, dst := im1.frame(min(b, im1.B-1)), im2.frame(min(b, im2.B-1)), out.frame(b)
		for i := range dst {
			a, v := p1[i], p2[i]
			r := float32(a*keep) + float32(blendPixel(a, v, mode)*mix)
			dst[i] = min(max(r, 0), 1)
		}
	}
	return out, nil
}

// blendPixel applies one blend mode with float32 rounding after every
// operation, in the order ComfyUI's expressions evaluate.
func blendPixel(a, b float32, mode string) float32 {
	switch mode {
	case "multiply":
		return a * b
	case "screen":
		return 1 - float32(float32(1-a)*float32(1-b))
	case "overlay":
		if a <= 0.5 {
			return float32(2*a) * b
		}
		return 1 - float32(float32(2*float32(1-a))*float32(1-b))
	case "soft_light":
		if b <= 0.5 {
			return a - float32(float32(float32(1-float32(2*b))*a)*float32(1-a))
		}
		return a + float32(float32(float32(2*b)-1)*float32(softLightG(a)-a))
	case "difference":
		return a - b
	}
	return b // normal
}

func softLightG(x float32) float32 {
	if x <= 0.25 {
		return float32(float32(float32(float32(16*x)-12)*x)+4) * x
	}
	return float32(math.Sqrt(float64(x)))
}

func runImageBlur(c *nodeCall) ([]any, error) {
	im, err := c.image("image")
	if err != nil {
		return nil, err
	}
	radius, err := c.intValue("blur_radius")
	if err != nil {
		return nil, err
	}
	sigma, err := c.floatValue("sigma")
	if err != nil {
		return nil, err
	}
	out, err := blur(c.ctx, im, radius, sigma)
	if err != nil {
		return nil, err
	}
	return []any{out}, nil
}

// gaussianKernel is ComfyUI's gaussian_kernel: a (2r+1)² grid over
// linspace(-1, 1) — sigma is relative to the radius, not in pixels —
// weighted exp(-d²/(2σ²)) in float32 and normalised to sum 1.
func gaussianKernel(size int, sigma float64) []float32 {
	lin := make([]float32, size)
	step := float32(2) / float32(size-1)
	for i := range lin {
		// torch.linspace fills the first half from the start and the second
		// from the end, which keeps the grid exactly symmetric.
		if i < size/2 {
			lin[i] = -1 + float32(step*float32(i))
		} else {
			lin[i] = 1 - float32(step*float32(size-1-i))
		}
	}
	den := float32(2.0 * sigma * sigma)
	k := make([]float32, size*size)
	var sum float64
	for y := range lin {
		for x := range lin {
			d := float32(math.Sqrt(float64(float32(lin[y]*lin[y]) + float32(lin[x]*lin[x]))))
			g := float32(math.Exp(float64(-float32(d*d) / den)))
			k[y*size+x] = g
			sum += float64(g)
		}
	}
	s := float32(sum)
	for i := range k {
		k[i] /= s
	}
	return k
}

// blur convolves every channel with the Gaussian kernel over a reflect-padded
// image, as ComfyUI's ImageBlur does with F.pad(mode="reflect") and conv2d.
// Reflect padding needs radius < height and width, like torch. The cost grows
// with radius², so it checks ctx on every row: a canceled job stops within a
// row, not after the node.
func blur(ctx context.Context, im *Image, radius int, sigma float64) (*Image, error) {
	if radius <= 0 {
		return im, nil
	}
	if radius >= im.H || radius >= im.W {
		return nil, fmt.Errorf("Padding size should be less than the corresponding input dimension, but got: padding (%d, %d) at dimension 3 of input %v", radius, radius, []int{im.B, im.C, im.H, im.W})
	}
	size := 2*radius + 1
	k := gaussianKernel(size, sigma)
	reflect := func(i, n int) int {
		if i < 0 {
			return -i
		}
		if i >= n {
			return 2*(n-1) - i
		}
		return i
	}
	out := &Image{B: im.B, H: im.H, W: im.W, C: im.C, Pix: make([]float32, len(im.Pix))}
	cols := make([]int, im.W+2*radius)
	for i := range cols {
		cols[i] = reflect(i-radius, im.W)
	}
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		for y := 0; y < im.H; y++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			for x := 0; x < im.W; x++ {
				var acc [4]float64
				for ky := 0; ky < size; ky++ {
					row := reflect(y+ky-radius, im.H) * im.W
					kr := k[ky*size : (ky+1)*size]
					for kx, kv := range kr {
						p := (row + cols[x+kx]) * im.C
						for ch := 0; ch < im.C && ch < 4; ch++ {
							acc[ch] += float64(in[p+ch]) * float64(kv)
						}
					}
				}
				d := (y*im.W + x) * im.C
				for ch := 0; ch < im.C && ch < 4; ch++ {
					dst[d+ch] = float32(acc[ch])
				}
			}
		}
	}
	return out, nil
}
