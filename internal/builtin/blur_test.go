package builtin

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// randomImage fills a b×h×w×c image with uniform values in 0..1.
func randomImage(rng *rand.Rand, b, h, w, c int) *Image {
	im := &Image{B: b, H: h, W: w, C: c, Pix: make([]float32, b*h*w*c)}
	for i := range im.Pix {
		im.Pix[i] = rng.Float32()
	}
	return im
}

// blurTolerance bounds |separable − 2D| per sample. The two differ only by
// the float32 rounding inside ComfyUI's 2D kernel (each weight is within a
// few float32 ulps of the product of two 1D weights) and by the float32
// rounding of the result: a few 1e-7 on values in 0..1. 1e-6 is 1/4000 of an
// 8-bit level, so a saved PNG can differ only where a value sits within 1e-6
// of a truncation boundary, as torch's own float32 accumulation can.
const blurTolerance = 1e-6

// TestBlurSeparableMatchesReference compares the separable blur with the
// direct 2D convolution it replaced on random images, every pixel (edges,
// where reflect padding decides, included): radii from 1 to the largest
// reflect padding allows, sigma from ComfyUI's minimum to its maximum,
// widths not a multiple of 4, batches, and 4 channels.
func TestBlurSeparableMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 9))
	cases := []struct {
		b, h, w, c, radius int
		sigma              float64
	}{
		{1, 2, 2, 3, 1, 1},
		{1, 5, 7, 3, 1, 0.1},
		{1, 9, 13, 3, 4, 1},
		{1, 32, 9, 3, 8, 10},   // radius = w-1: every padded column reflects
		{1, 17, 40, 3, 16, 3},  // radius = h-1
		{2, 37, 31, 3, 5, 0.5}, // batch
		{1, 64, 61, 4, 3, 2},   // 4 channels
		{1, 130, 127, 3, 31, 0.1},
		{1, 130, 127, 3, 31, 10},
		{1, 256, 190, 3, 15, 3}, // more than one band on 2+ CPUs
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%dx%dx%dx%d_r%d_s%g", tc.b, tc.h, tc.w, tc.c, tc.radius, tc.sigma), func(t *testing.T) {
			im := randomImage(rng, tc.b, tc.h, tc.w, tc.c)
			want, err := blur2D(context.Background(), im, tc.radius, tc.sigma)
			if err != nil {
				t.Fatal(err)
			}
			got, err := blur(context.Background(), im, tc.radius, tc.sigma)
			if err != nil {
				t.Fatal(err)
			}
			if !got.sameShape(want) {
				t.Fatalf("shape %dx%dx%dx%d, want %dx%dx%dx%d", got.B, got.H, got.W, got.C, want.B, want.H, want.W, want.C)
			}
			var worst float64
			at := -1
			for i := range want.Pix {
				if d := math.Abs(float64(got.Pix[i] - want.Pix[i])); d > worst || math.IsNaN(d) {
					worst, at = d, i
				}
			}
			if worst > blurTolerance || math.IsNaN(worst) {
				t.Fatalf("sample %d: separable %v, 2D %v (difference %g > %g)", at, got.Pix[at], want.Pix[at], worst, blurTolerance)
			}
			t.Logf("largest difference %g", worst)
		})
	}
}

// TestBlurTilingAgrees: cutting a frame into bands of rows (one per CPU)
// and bands into strips of columns must not change a single bit, whatever
// the cuts.
func TestBlurTilingAgrees(t *testing.T) {
	rng := rand.New(rand.NewPCG(26, 10))
	const h, w, c, radius = 50, 23, 3, 7
	im := randomImage(rng, 1, h, w, c)
	p := newBlurPlan(radius, 2, h, w, c)
	p.strip = w
	whole := make([]float32, len(im.Pix))
	if err := p.band(context.Background(), im.Pix, whole, 0, h); err != nil {
		t.Fatal(err)
	}
	for _, strip := range []int{w, 1, 4, 5, 16} {
		for _, cuts := range [][]int{{0, h}, {0, 1, h}, {0, 7, 8, h}, {0, 25, h - 1, h}, {0, 3, 10, 20, 30, 45, h}} {
			p.strip = strip
			got := make([]float32, len(im.Pix))
			for i := 0; i+1 < len(cuts); i++ {
				if err := p.band(context.Background(), im.Pix, got, cuts[i], cuts[i+1]); err != nil {
					t.Fatal(err)
				}
			}
			for i := range whole {
				if got[i] != whole[i] {
					t.Fatalf("strips of %d, bands %v: sample %d = %v, whole frame %v", strip, cuts, i, got[i], whole[i])
				}
			}
		}
	}
}

// TestSeparableKernel: the outer product of the 1D weights is ComfyUI's 2D
// kernel up to float32 rounding, symmetric, with the same total weight.
// Σ|w[y]w[x] − k[y][x]| bounds what the difference can move a blurred value
// in 0..1; single weights far from the centre of a narrow kernel differ
// relatively more (their float32 exponent is large), but they are tiny.
func TestSeparableKernel(t *testing.T) {
	for _, size := range []int{3, 9, 31, 63} {
		for _, sigma := range []float64{0.1, 0.5, 1, 3, 10} {
			k, w := gaussianKernel(size, sigma), separableKernel(size, sigma)
			var total, wsum, deviation float64
			for y := range size {
				if w[y] != w[size-1-y] {
					t.Fatalf("size %d sigma %v: w[%d]=%v, w[%d]=%v", size, sigma, y, w[y], size-1-y, w[size-1-y])
				}
				wsum += w[y]
				for x := range size {
					kv := float64(k[y*size+x])
					total += kv
					deviation += math.Abs(w[y]*w[x] - kv)
				}
			}
			if deviation > 2e-7 {
				t.Fatalf("size %d sigma %v: Σ|w⊗w − k| = %g", size, sigma, deviation)
			}
			if math.Abs(wsum*wsum-total) > 1e-12 {
				t.Fatalf("size %d sigma %v: (Σw)² = %v, Σk = %v", size, sigma, wsum*wsum, total)
			}
		}
	}
}

// processCPU is the CPU time (user + system) this process has used: on a
// shared machine it says what a blur costs when wall time says how busy the
// machine was.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkImageBlur runs the 2D convolution this package used before
// (blur2D) and the separable blur on the same images in one run, reporting
// wall and CPU time per blur:
//
//	go test -run '^$' -bench ImageBlur -benchtime 1x -count 3 ./internal/builtin/
func BenchmarkImageBlur(b *testing.B) {
	rng := rand.New(rand.NewPCG(26, 11))
	for _, sz := range []struct{ side, radius int }{{1024, 15}, {2048, 31}} {
		im := randomImage(rng, 1, sz.side, sz.side, 3)
		for _, impl := range []struct {
			name string
			fn   func(context.Context, *Image, int, float64) (*Image, error)
		}{{"2D", blur2D}, {"separable", blur}} {
			b.Run(fmt.Sprintf("%d_r%d/%s", sz.side, sz.radius, impl.name), func(b *testing.B) {
				cpu0 := processCPU(b)
				for b.Loop() {
					if _, err := impl.fn(context.Background(), im, sz.radius, 3); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
