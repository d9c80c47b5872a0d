package builtin

import (
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
		//lint:ignore ST1005 torch's own message, word for word: clients match ComfyUI's errors
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
