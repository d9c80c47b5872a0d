package builtin

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
)

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

// separableKernel returns 1D weights w with w[y]·w[x] equal to ComfyUI's 2D
// kernel k[y][x] up to float32 rounding: exp(-(x²+y²)/2σ²) is the product
// of exp(-x²/2σ²) and exp(-y²/2σ²), and k differs from that product only by
// the rounding of its float32 arithmetic. w is derived from k itself (its
// row sums) rather than from a 1D formula, so the kernel stays ComfyUI's,
// and scaled so that Σw·Σw equals Σk: a flat image comes out as the 2D
// convolution leaves it. k is exactly symmetric, and so is w.
func separableKernel(size int, sigma float64) []float64 {
	k := gaussianKernel(size, sigma)
	w := make([]float64, size)
	var total float64
	for y := range w {
		for _, v := range k[y*size : (y+1)*size] {
			w[y] += float64(v)
		}
		total += w[y]
	}
	scale := 1 / math.Sqrt(total)
	for i := range w {
		w[i] *= scale
	}
	return w
}

// reflectIndex maps i in [-(n-1), 2(n-1)] into [0, n) as torch's reflect
// padding does (the edge pixel is not repeated).
func reflectIndex(i, n int) int {
	if i < 0 {
		return -i
	}
	if i >= n {
		return 2*(n-1) - i
	}
	return i
}

// blur is ComfyUI's ImageBlur: every channel convolved with the Gaussian
// kernel over an image reflect-padded by the radius (F.pad(mode="reflect"),
// then conv2d). Reflect padding needs radius < height and width, like torch.
// The kernel is separable, so it runs as a row pass then a column pass —
// 2(2r+1) terms per sample instead of (2r+1)² — accumulated in float64;
// the result is the 2D convolution's up to float32 rounding. Frames are cut
// into bands of rows, one per CPU, bands into strips of columns whose
// intermediate rows stay in cache, and every band checks ctx on each row: a
// canceled job stops within a row, not after the node.
func blur(ctx context.Context, im *Image, radius int, sigma float64) (*Image, error) {
	if radius <= 0 {
		return im, nil
	}
	if radius >= im.H || radius >= im.W {
		//lint:ignore ST1005 torch's own message, word for word: clients match ComfyUI's errors
		return nil, fmt.Errorf("Padding size should be less than the corresponding input dimension, but got: padding (%d, %d) at dimension 3 of input %v", radius, radius, []int{im.B, im.C, im.H, im.W})
	}
	p := newBlurPlan(radius, sigma, im.H, im.W, im.C)
	out := &Image{B: im.B, H: im.H, W: im.W, C: im.C, Pix: make([]float32, len(im.Pix))}
	bands := blurBands(im.H, radius)
	for b := 0; b < im.B; b++ {
		in, dst := im.frame(b), out.frame(b)
		errs := make([]error, bands)
		var wg sync.WaitGroup
		for i := range bands {
			y0, y1 := i*im.H/bands, (i+1)*im.H/bands
			wg.Go(func() { errs[i] = p.band(ctx, in, dst, y0, y1) })
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// blurBands is how many bands a frame is cut into: one per CPU, but a band
// recomputes the row pass of the 2r rows it shares with its neighbours,
// and bands shorter than 4r rows would waste more than they gain.
func blurBands(h, radius int) int {
	return max(1, min(runtime.GOMAXPROCS(0), h/(4*radius)))
}

// blurScratch is what the bands of one frame allocate (see band).
func blurScratch(h, w, c, radius int) int64 {
	size := 2*radius + 1
	strip := min(blurStrip(size, c), w)
	n := min(size, h) // at most: a band's ring rows
	return int64(blurBands(h, radius)) * (8*int64(n*strip*c) + 8*int64(strip+2*radius) + 24*int64(size))
}

// blurStrip is the width of a band's strips of columns.
func blurStrip(size, c int) int { return max(16, ringBytes/(8*size*c)) }

// blurPlan is what every band of every frame shares: the 1D weights (2r+1
// of them), the frame's shape, the source column of each padded column and
// the width of the strips a band is cut into.
type blurPlan struct {
	w           []float64
	r           int
	h, width, c int
	cols        []int
	strip       int
}

func newBlurPlan(radius int, sigma float64, h, width, c int) *blurPlan {
	p := &blurPlan{w: separableKernel(2*radius+1, sigma), r: radius, h: h, width: width, c: c}
	p.strip = blurStrip(len(p.w), c)
	p.cols = make([]int, width+2*radius)
	for i := range p.cols {
		p.cols[i] = reflectIndex(i-radius, width)
	}
	return p
}

// ringBytes is the size the row pass results of one strip are kept to
// (2r+1 rows of a strip's columns, in float64): small enough to stay in a
// core's L2 cache while the column pass reads each of them for every output
// row. Whole rows of a 2048-wide image at r = 31 are 3 MiB, and the column
// pass then waits on memory.
const ringBytes = 256 << 10

// band writes output rows [y0, y1) of one frame, strip by strip.
func (p *blurPlan) band(ctx context.Context, in, dst []float32, y0, y1 int) error {
	strip := min(p.strip, p.width)
	n := min(len(p.w), min(p.h, y1+p.r)-max(0, y0-p.r)) // source rows in a ring
	ring := make([]float64, n*strip*p.c)
	pad := make([]float64, strip+2*p.r)
	for x0 := 0; x0 < p.width; x0 += strip {
		x1 := min(p.width, x0+strip)
		if err := p.tile(ctx, in, dst, x0, x1, y0, y1, ring, pad[:x1-x0+2*p.r]); err != nil {
			return err
		}
	}
	return nil
}

// tile writes columns [x0, x1) of output rows [y0, y1). It keeps the row
// pass of the last n = min(2r+1, rows the band reads) source rows in ring,
// so each source row is filtered once per tile: every output row reads the
// reflected rows y-r..y+r, which all lie in the contiguous range
// max(0, y-r)..min(h-1, y+r) and so in the ring.
func (p *blurPlan) tile(ctx context.Context, in, dst []float32, x0, x1, y0, y1 int, ring, pad []float64) error {
	size, rowLen, segLen := len(p.w), p.width*p.c, (x1-x0)*p.c
	lo, hi := max(0, y0-p.r), min(p.h, y1+p.r) // source rows [lo, hi)
	n := min(size, hi-lo)
	rows := make([][]float64, size)
	next := lo
	for y := y0; y < y1; y++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		for ; next < min(p.h, y+p.r+1); next++ {
			p.rowPass(in[next*rowLen:(next+1)*rowLen], x0, ring[(next%n)*segLen:][:segLen], pad)
		}
		for i := range rows {
			s := reflectIndex(y+i-p.r, p.h)
			rows[i] = ring[(s%n)*segLen:][:segLen]
		}
		columnPass(p.w, rows, dst[y*rowLen+x0*p.c:][:segLen])
	}
	return nil
}

// rowPass filters columns [x0, x0+len(pad)-2r) of one interleaved row into
// out, channel by channel through pad, the channel's reflect-padded copy in
// float64.
func (p *blurPlan) rowPass(src []float32, x0 int, out, pad []float64) {
	w, c, r := p.w, p.c, p.r
	size, width := len(w), len(pad)-2*p.r
	for ch := 0; ch < c; ch++ {
		for i, s := range p.cols[x0 : x0+len(pad)] {
			pad[i] = float64(src[s*c+ch])
		}
		x := 0
		// Four outputs at a time: four independent sums keep the FPU busy
		// and each weight is loaded once for all four.
		for ; x+4 <= width; x += 4 {
			win := pad[x : x+size+3]
			mid := win[r : r+4 : r+4]
			kc := w[r]
			a0, a1, a2, a3 := kc*mid[0], kc*mid[1], kc*mid[2], kc*mid[3]
			for i, k := range w[:r] {
				q, e := win[i:i+4:i+4], win[size-1-i:size+3-i:size+3-i]
				a0 += k * (q[0] + e[0])
				a1 += k * (q[1] + e[1])
				a2 += k * (q[2] + e[2])
				a3 += k * (q[3] + e[3])
			}
			out[x*c+ch] = a0
			out[(x+1)*c+ch] = a1
			out[(x+2)*c+ch] = a2
			out[(x+3)*c+ch] = a3
		}
		for ; x < width; x++ { // the same sums, one at a time
			win := pad[x : x+size]
			a := w[r] * win[r]
			for i, k := range w[:r] {
				a += k * (win[i] + win[size-1-i])
			}
			out[x*c+ch] = a
		}
	}
}

// columnPass sums the weighted rows into one output row of float32. Like
// rowPass it adds the two rows a weight applies to before multiplying (the
// kernel is symmetric), which halves the products.
func columnPass(w []float64, rows [][]float64, dst []float32) {
	r, size := len(w)/2, len(w)
	j := 0
	for ; j+4 <= len(dst); j += 4 {
		mid := rows[r][j : j+4 : j+4]
		kc := w[r]
		a0, a1, a2, a3 := kc*mid[0], kc*mid[1], kc*mid[2], kc*mid[3]
		for i, k := range w[:r] {
			q, e := rows[i][j:j+4:j+4], rows[size-1-i][j:j+4:j+4]
			a0 += k * (q[0] + e[0])
			a1 += k * (q[1] + e[1])
			a2 += k * (q[2] + e[2])
			a3 += k * (q[3] + e[3])
		}
		dst[j], dst[j+1], dst[j+2], dst[j+3] = float32(a0), float32(a1), float32(a2), float32(a3)
	}
	for ; j < len(dst); j++ { // the same sums, one at a time
		a := w[r] * rows[r][j]
		for i, k := range w[:r] {
			a += k * (rows[i][j] + rows[size-1-i][j])
		}
		dst[j] = float32(a)
	}
}
