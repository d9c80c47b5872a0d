package builtin

import (
	"context"
	"fmt"
)

// blur2D is the ImageBlur of commit 4bd1ca3, kept as the reference the
// separable blur is tested and benchmarked against: a direct (2r+1)² convolution
// with ComfyUI's 2D kernel over the reflect-padded image, accumulated in
// float64. Only tests use it.
func blur2D(ctx context.Context, im *Image, radius int, sigma float64) (*Image, error) {
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
