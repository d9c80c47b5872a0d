package builtin

import (
	"math"
	"strings"
	"testing"
)

func TestPixelNodes(t *testing.T) {
	in23 := [][]float32{{.1, .2, .3}, {.4, .5, .6}}
	in33 := [][]float32{{.1, .2, .3}, {.4, .5, .6}, {.7, .8, .9}}
	tests := []struct {
		name   string
		class  string
		image  [][]float32
		inputs map[string]any
		want   [][]float32
	}{
		{"invert", "ImageInvert", [][]float32{{0, .25}, {.5, 1}}, nil, [][]float32{{1, .75}, {.5, 0}}},
		{"flip vertically", "ImageFlip", in23, map[string]any{"flip_method": "x-axis: vertically"}, [][]float32{{.4, .5, .6}, {.1, .2, .3}}},
		{"flip horizontally", "ImageFlip", in23, map[string]any{"flip_method": "y-axis: horizontally"}, [][]float32{{.3, .2, .1}, {.6, .5, .4}}},
		{"rotate none", "ImageRotate", in23, map[string]any{"rotation": "none"}, in23},
		{"rotate 90 clockwise", "ImageRotate", in23, map[string]any{"rotation": "90 degrees"}, [][]float32{{.4, .1}, {.5, .2}, {.6, .3}}},
		{"rotate 180", "ImageRotate", in23, map[string]any{"rotation": "180 degrees"}, [][]float32{{.6, .5, .4}, {.3, .2, .1}}},
		{"rotate 270", "ImageRotate", in23, map[string]any{"rotation": "270 degrees"}, [][]float32{{.3, .6}, {.2, .5}, {.1, .4}}},
		{"crop inside", "ImageCrop", in33, map[string]any{"width": 2.0, "height": 2.0, "x": 1.0, "y": 1.0}, [][]float32{{.5, .6}, {.8, .9}}},
		{"crop x clamped to last column", "ImageCrop", in33, map[string]any{"width": 5.0, "height": 1.0, "x": 10.0, "y": 0.0}, [][]float32{{.3}}},
		{"crop clipped at bottom", "ImageCrop", in33, map[string]any{"width": 1.0, "height": 5.0, "x": 0.0, "y": 1.0}, [][]float32{{.4}, {.7}}},
		{"nearest-exact 2x", "ImageScale", [][]float32{{.1, .9}}, map[string]any{"upscale_method": "nearest-exact", "width": 4.0, "height": 1.0, "crop": "disabled"}, [][]float32{{.1, .1, .9, .9}}},
		{"area half", "ImageScale", [][]float32{{0, 1, .5, .5}}, map[string]any{"upscale_method": "area", "width": 2.0, "height": 1.0, "crop": "disabled"}, [][]float32{{.5, .5}}},
		{"bilinear 2x", "ImageScale", [][]float32{{0, 1}}, map[string]any{"upscale_method": "bilinear", "width": 4.0, "height": 1.0, "crop": "disabled"}, [][]float32{{0, .25, .75, 1}}},
		// Bicubic overshoots and ComfyUI does not clamp: -0.10546875 is
		// cubic_convolution2(1.25, -0.75), exact in float32.
		{"bicubic 2x unclamped", "ImageScale", [][]float32{{0, 1}}, map[string]any{"upscale_method": "bicubic", "width": 4.0, "height": 1.0, "crop": "disabled"}, [][]float32{{-0.10546875, 0.2265625, 0.7734375, 1.10546875}}},
		{"lanczos same size quantises", "ImageScaleBy", [][]float32{{.5, 200.0 / 255}}, map[string]any{"upscale_method": "lanczos", "scale_by": 1.0}, [][]float32{{fromUint8(127), fromUint8(200)}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			inputs := map[string]any{"image": gray(t, tc.image)}
			for k, v := range tc.inputs {
				inputs[k] = v
			}
			out, err := callNode(t, tc.class, inputs, Env{})
			if err != nil {
				t.Fatal(err)
			}
			got := out[0].(*Image)
			if !equalRows(grayOf(got), tc.want) {
				t.Fatalf("got %v, want %v", grayOf(got), tc.want)
			}
			if got.C != 3 || len(got.Pix) != got.B*got.H*got.W*3 {
				t.Fatalf("bad tensor shape %+v", got)
			}
		})
	}
}

func TestBlendModes(t *testing.T) {
	tests := []struct {
		mode   string
		factor float64
		a, b   []float32
		want   []float32
	}{
		{"normal", 1, []float32{.25, .75}, []float32{.5, .25}, []float32{.5, .25}},
		{"normal", .5, []float32{.25, 0}, []float32{.75, 1}, []float32{.5, .5}},
		{"multiply", 1, []float32{.25, 1}, []float32{.5, .5}, []float32{.125, .5}},
		{"screen", 1, []float32{.25, .5}, []float32{.5, .5}, []float32{.625, .75}},
		{"overlay", 1, []float32{.25, .75}, []float32{.5, .75}, []float32{.25, .875}},
		{"soft_light", 1, []float32{.25, .25}, []float32{.5, .75}, []float32{.25, .375}},
		{"difference", 1, []float32{.25, .75}, []float32{.5, .25}, []float32{0, .5}},
		{"difference", 0, []float32{.25, .75}, []float32{.5, .25}, []float32{.25, .75}},
	}
	for _, tc := range tests {
		t.Run(tc.mode, func(t *testing.T) {
			out, err := callNode(t, "ImageBlend", map[string]any{
				"image1": gray(t, [][]float32{tc.a}), "image2": gray(t, [][]float32{tc.b}),
				"blend_factor": tc.factor, "blend_mode": tc.mode,
			}, Env{})
			if err != nil {
				t.Fatal(err)
			}
			if got := grayOf(out[0].(*Image)); !equalRows(got, [][]float32{tc.want}) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBlendResizesImage2(t *testing.T) {
	big := gray(t, [][]float32{{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}})
	small := gray(t, [][]float32{{.5, .5}, {.5, .5}})
	out, err := callNode(t, "ImageBlend", map[string]any{"image1": big, "image2": small, "blend_factor": 1.0, "blend_mode": "normal"}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	got := out[0].(*Image)
	if got.H != 3 || got.W != 4 {
		t.Fatalf("blend output %dx%d, want 4x3", got.W, got.H)
	}
	for _, v := range got.Pix {
		if math.Abs(float64(v)-.5) > 1e-6 {
			t.Fatalf("resized constant image2 should stay 0.5, got %v", v)
		}
	}
}

func TestEmptyImage(t *testing.T) {
	out, err := callNode(t, "EmptyImage", map[string]any{"width": 3.0, "height": 2.0, "batch_size": 2.0, "color": float64(0x336699)}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	im := out[0].(*Image)
	if im.B != 2 || im.H != 2 || im.W != 3 {
		t.Fatalf("shape %+v", im)
	}
	want := [3]float32{float32(0x33 / 255.0), float32(0x66 / 255.0), float32(0x99 / 255.0)}
	for i := 0; i < len(im.Pix); i += 3 {
		if [3]float32(im.Pix[i:i+3]) != want {
			t.Fatalf("pixel %d = %v, want %v", i/3, im.Pix[i:i+3], want)
		}
	}
}

func TestScaleDimensions(t *testing.T) {
	src := [][]float32{make([]float32, 6), make([]float32, 6), make([]float32, 6), make([]float32, 6)} // 6 wide, 4 high
	five := [][]float32{make([]float32, 5), make([]float32, 5)}                                        // 5 wide, 2 high
	tests := []struct {
		name         string
		class        string
		image        [][]float32
		inputs       map[string]any
		wantW, wantH int
	}{
		{"height from width", "ImageScale", src, map[string]any{"width": 3.0, "height": 0.0, "crop": "disabled"}, 3, 2},
		{"width from height", "ImageScale", src, map[string]any{"width": 0.0, "height": 2.0, "crop": "disabled"}, 3, 2},
		{"both zero passthrough", "ImageScale", src, map[string]any{"width": 0.0, "height": 0.0, "crop": "disabled"}, 6, 4},
		{"center crop", "ImageScale", src, map[string]any{"width": 2.0, "height": 2.0, "crop": "center"}, 2, 2},
		{"upscale", "ImageScale", src, map[string]any{"width": 13.0, "height": 7.0, "crop": "disabled"}, 13, 7},
		{"scale by half", "ImageScaleBy", src, map[string]any{"scale_by": 0.5}, 3, 2},
		{"scale by 1.5", "ImageScaleBy", src, map[string]any{"scale_by": 1.5}, 9, 6},
		{"scale by rounds half to even", "ImageScaleBy", five, map[string]any{"scale_by": 0.5}, 2, 1},
	}
	for _, tc := range tests {
		for _, method := range upscaleMethods {
			t.Run(tc.name+"/"+method, func(t *testing.T) {
				inputs := map[string]any{"image": gray(t, tc.image), "upscale_method": method}
				for k, v := range tc.inputs {
					inputs[k] = v
				}
				out, err := callNode(t, tc.class, inputs, Env{})
				if err != nil {
					t.Fatal(err)
				}
				if im := out[0].(*Image); im.W != tc.wantW || im.H != tc.wantH || len(im.Pix) != im.W*im.H*3 {
					t.Fatalf("got %dx%d, want %dx%d", im.W, im.H, tc.wantW, tc.wantH)
				}
			})
		}
	}
}

func TestScaleKeepsConstantImages(t *testing.T) {
	v := float32(200) / 255
	row := []float32{v, v, v, v, v, v, v, v}
	src := [][]float32{row, row, row, row, row, row, row, row}
	for _, method := range upscaleMethods {
		for _, size := range []float64{3, 8, 21} {
			out, err := callNode(t, "ImageScale", map[string]any{"image": gray(t, src), "upscale_method": method, "width": size, "height": size, "crop": "disabled"}, Env{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range out[0].(*Image).Pix {
				if math.Abs(float64(p-v)) > 4e-6 { // float32 weights need not sum to exactly 1
					t.Fatalf("%s to %v: constant 200/255 became %v", method, size, p)
				}
			}
		}
	}
}

func TestBlur(t *testing.T) {
	impulse := [][]float32{make([]float32, 5), make([]float32, 5), {0, 0, 1, 0, 0}, make([]float32, 5), make([]float32, 5)}
	out, err := callNode(t, "ImageBlur", map[string]any{"image": gray(t, impulse), "blur_radius": 1.0, "sigma": 1.0}, Env{})
	if err != nil {
		t.Fatal(err)
	}
	g := grayOf(out[0].(*Image))
	var sum float64
	for _, r := range g {
		for _, v := range r {
			sum += float64(v)
		}
	}
	if math.Abs(sum-1) > 1e-6 {
		t.Fatalf("blurred impulse sums to %v, want 1", sum)
	}
	// Kernel over linspace(-1,1,3): weights ∝ exp(-d²/2) with d² in {0,1,2}.
	e1, e2 := math.Exp(-0.5), math.Exp(-1)
	norm := 1 + 4*e1 + 4*e2
	for _, c := range []struct {
		y, x int
		want float64
	}{{2, 2, 1 / norm}, {1, 2, e1 / norm}, {2, 3, e1 / norm}, {1, 1, e2 / norm}, {3, 3, e2 / norm}, {0, 0, 0}} {
		if math.Abs(float64(g[c.y][c.x])-c.want) > 1e-6 {
			t.Errorf("pixel (%d,%d) = %v, want %v", c.y, c.x, g[c.y][c.x], c.want)
		}
	}
	if _, err := callNode(t, "ImageBlur", map[string]any{"image": gray(t, [][]float32{{0, 0}, {0, 0}}), "blur_radius": 2.0, "sigma": 1.0}, Env{}); err == nil || !strings.Contains(err.Error(), "Padding size") {
		t.Fatalf("radius >= size should fail like torch reflect pad, got %v", err)
	}
}

func TestInputErrors(t *testing.T) {
	im := gray(t, [][]float32{{0}})
	tests := []struct {
		name   string
		class  string
		inputs map[string]any
		want   string
	}{
		{"missing widget", "ImageFlip", map[string]any{"image": im}, "Required input is missing: flip_method"},
		{"bad combo", "ImageRotate", map[string]any{"image": im, "rotation": "45 degrees"}, "not in"},
		{"over max", "EmptyImage", map[string]any{"width": 20000.0, "height": 1.0, "batch_size": 1.0, "color": 0.0}, "bigger than max"},
		{"under min", "ImageScaleBy", map[string]any{"image": im, "upscale_method": "area", "scale_by": 0.0}, "smaller than min"},
		{"not a number", "ImageCrop", map[string]any{"image": im, "width": "wide", "height": 1.0, "x": 0.0, "y": 0.0}, "INT"},
		{"scale to zero", "ImageScaleBy", map[string]any{"image": im, "upscale_method": "area", "scale_by": 0.01}, "greater than 0"},
		{"wrong link type", "ImageInvert", map[string]any{"image": &Mask{B: 1, H: 1, W: 1, Pix: []float32{0}}}, "expected IMAGE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := callNode(t, tc.class, tc.inputs, Env{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
