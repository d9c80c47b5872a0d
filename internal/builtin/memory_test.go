package builtin

import (
	"bytes"
	"context"
	"errors"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/comfygate/comfygate/internal/membudget"
	"github.com/comfygate/comfygate/tests/bombs"
)

// sized is an opened input that tells its size, as the gateway's asset
// readers do.
type sized struct{ *bytes.Reader }

func (sized) Close() error { return nil }

func sizedOpener(files map[string][]byte) func(context.Context, string) (io.ReadCloser, error) {
	return func(_ context.Context, name string) (io.ReadCloser, error) {
		b, ok := files[name]
		if !ok {
			return nil, io.ErrUnexpectedEOF
		}
		return sized{bytes.NewReader(b)}, nil
	}
}

// accountedRun runs prompt as Execute does, checking after every node that
// what the run accounts is exactly the tensors its results hold, and
// returns the estimate and the peak the run accounted.
func accountedRun(t *testing.T, prompt map[string]Node, env Env) (estimated, peak int64) {
	t.Helper()
	order, err := plan(prompt)
	if err != nil {
		t.Fatal(err)
	}
	estimated, err = estimate(context.Background(), prompt, order, env)
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(prompt, env, len(order))
	if r.env.OnOutput == nil {
		r.env.OnOutput = func(context.Context, Output) error { return nil }
	}
	r.env.OnProgress = func(p Progress) {
		var held int64
		seen := map[any]bool{}
		for _, outs := range r.results {
			for _, v := range outs {
				if n, ok := tensorBytes(v); ok && !seen[v] {
					seen[v] = true
					held += n
				}
			}
		}
		if r.mem.used != held {
			t.Errorf("after node %s (%s) the run accounts %d bytes, its results hold %d", p.NodeID, p.ClassType, r.mem.used, held)
		}
	}
	if err := r.all(context.Background(), order); err != nil {
		t.Fatal(err)
	}
	return estimated, r.mem.peak
}

// TestEstimateIsWhatTheRunCharges: for prompts through every node, the
// estimate made before the run equals the peak the run accounts, and the
// run accounts, after each node, exactly the tensors still held.
func TestEstimateIsWhatTheRunCharges(t *testing.T) {
	rgba := image.NewNRGBA(image.Rect(0, 0, 40, 30))
	for i := range rgba.Pix {
		rgba.Pix[i] = uint8(i * 7)
	}
	files := map[string][]byte{"rgba.png": encodePNG(t, rgba), "gray.png": bombs.PNG(50, 20, 0, 8, false),
		"rotated.jpg": jpegWithOrientation(t, 6)}
	cases := []struct {
		name   string
		prompt string
	}{
		{"empty, invert, save", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 2, "color": 255}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "a"}}}`},
		{"scales with crop and lanczos", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 64, "height": 48, "batch_size": 2, "color": 0}},
			"2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "bilinear", "width": 100, "height": 100, "crop": "center"}},
			"3": {"class_type": "ImageScaleBy", "inputs": {"image": ["2", 0], "upscale_method": "lanczos", "scale_by": 1.5}},
			"4": {"class_type": "ImageScale", "inputs": {"image": ["3", 0], "upscale_method": "area", "width": 0, "height": 20, "crop": "disabled"}},
			"5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}}}`},
		{"pass-throughs and transforms", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 30, "height": 20, "batch_size": 1, "color": 0}},
			"2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], "upscale_method": "nearest-exact", "width": 0, "height": 0, "crop": "disabled"}},
			"3": {"class_type": "ImageRotate", "inputs": {"image": ["2", 0], "rotation": "none"}},
			"4": {"class_type": "ImageRotate", "inputs": {"image": ["3", 0], "rotation": "90 degrees"}},
			"5": {"class_type": "ImageCrop", "inputs": {"image": ["4", 0], "width": 100, "height": 7, "x": 3, "y": 25}},
			"6": {"class_type": "ImageFlip", "inputs": {"image": ["5", 0], "flip_method": "x-axis: vertically"}},
			"7": {"class_type": "ImageBlur", "inputs": {"image": ["6", 0], "blur_radius": 2, "sigma": 1.0}},
			"8": {"class_type": "SaveImage", "inputs": {"images": ["7", 0], "filename_prefix": "b"}},
			"9": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "c"}}}`},
		{"blend resizing and broadcasting", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 40, "height": 30, "batch_size": 3, "color": 0}},
			"2": {"class_type": "EmptyImage", "inputs": {"width": 25, "height": 35, "batch_size": 1, "color": 0}},
			"3": {"class_type": "ImageBlend", "inputs": {"image1": ["1", 0], "image2": ["2", 0], "blend_factor": 0.5, "blend_mode": "screen"}},
			"4": {"class_type": "ImageBlend", "inputs": {"image1": ["3", 0], "image2": ["3", 0], "blend_factor": 0.5, "blend_mode": "multiply"}},
			"5": {"class_type": "PreviewImage", "inputs": {"images": ["4", 0]}}}`},
		{"loaded inputs", `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "rgba.png"}},
			"2": {"class_type": "LoadImage", "inputs": {"image": "gray.png"}},
			"3": {"class_type": "LoadImage", "inputs": {"image": "rotated.jpg"}},
			"4": {"class_type": "ImageBlend", "inputs": {"image1": ["1", 0], "image2": ["2", 0], "blend_factor": 0.3, "blend_mode": "normal"}},
			"5": {"class_type": "ImageBlend", "inputs": {"image1": ["4", 0], "image2": ["3", 0], "blend_factor": 0.3, "blend_mode": "normal"}},
			"6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": "d"}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			est, peak := accountedRun(t, decodePrompt(t, tc.prompt), Env{OpenInput: sizedOpener(files), PromptJSON: []byte(tc.prompt)})
			if est != peak || peak == 0 {
				t.Errorf("estimated %d bytes, the run accounted a peak of %d", est, peak)
			}
		})
	}
}

// TestEstimateCoversAnInputOfUnknownSize: an opener that does not tell
// the file's size makes LoadImage read into a doubling buffer; the
// estimate counts the largest it can be.
func TestEstimateCoversAnInputOfUnknownSize(t *testing.T) {
	prompt := decodePrompt(t, `{
		"1": {"class_type": "LoadImage", "inputs": {"image": "big.png"}},
		"2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}`)
	noise := image.NewRGBA(image.Rect(0, 0, 300, 300)) // about 350 KB of PNG: the buffer doubles three times
	for i := range noise.Pix {
		noise.Pix[i] = uint8(i*i>>3) ^ uint8(i>>5)
	}
	est, peak := accountedRun(t, prompt, Env{OpenInput: opener(map[string][]byte{"big.png": encodePNG(t, noise)})})
	if est < peak {
		t.Errorf("estimated %d bytes, the run accounted a peak of %d", est, peak)
	}
}

// TestMemoryBound: a prompt over the job's bound fails before its first
// node when the estimate shows it (naming the node where it crosses the
// bound), and a tensor over ComfyUI's own bound keeps ComfyUI's refusal.
func TestMemoryBound(t *testing.T) {
	files := map[string][]byte{
		"bomb.png":  bombs.PNG(30000, 30000, 0, 8, false),
		"heavy.png": bombs.PNG(12000, 12000, 6, 16, false), // under the pixel bound: 1.15 GB to decode, 1.7 GB of tensor
	}
	cases := []struct {
		name     string
		prompt   string
		limit    int64
		node     string // the failing node
		message  string
		startedN int // nodes started before the failure
	}{
		{"8192² invert chain", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 8192, "height": 8192, "batch_size": 1, "color": 0}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
			"3": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}}}`,
			1 << 30, "2", "the workflow needs 1.5 GiB of memory by this node, over the 1.0 GiB one job may use", 0},
		{"a batch over the bound at once", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 4096, "height": 4096, "batch_size": 8, "color": 0}},
			"2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}`,
			512 << 20, "1", "needs 1.5 GiB of memory by this node, over the 512 MiB", 0},
		{"a large input", `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "heavy.png"}},
			"2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}`,
			1 << 30, "1", "over the 1.0 GiB one job may use", 0},
		{"a tensor over ComfyUI's bound", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 16384, "height": 16384, "batch_size": 1, "color": 0}},
			"2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}`,
			1 << 30, "1", "exceeds the limit of 178956970 pixels", 1},
		{"a decompression bomb", `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "bomb.png"}},
			"2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}`,
			1 << 30, "1", "image size (900000000 pixels) exceeds limit of 178956970 pixels", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			started := 0
			err := Execute(context.Background(), decodePrompt(t, tc.prompt), Env{
				OpenInput: sizedOpener(files), JobMemory: tc.limit,
				OnStart:  func(Progress) { started++ },
				OnOutput: func(context.Context, Output) error { return nil },
			})
			var ne *NodeError
			if !errors.As(err, &ne) || ne.NodeID != tc.node || !strings.Contains(ne.Message, tc.message) {
				t.Fatalf("Execute = %v, want node %s failing with %q", err, tc.node, tc.message)
			}
			if started != tc.startedN {
				t.Errorf("%d nodes started, want %d", started, tc.startedN)
			}
		})
	}
}

// TestCheckMemory is the submit-time check: what widgets decide is known
// before any input is opened.
func TestCheckMemory(t *testing.T) {
	cases := []struct {
		name   string
		prompt string
		node   string // "" = passes
	}{
		{"8192² with a batch", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 8192, "height": 8192, "batch_size": 2, "color": 0}},
			"2": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}}`, "1"},
		{"an ordinary upscale", `{
			"1": {"class_type": "EmptyImage", "inputs": {"width": 2048, "height": 2048, "batch_size": 1, "color": 0}},
			"2": {"class_type": "ImageScaleBy", "inputs": {"image": ["1", 0], "upscale_method": "bicubic", "scale_by": 2}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "x"}}}`, ""},
		{"what an input decides is not known yet", `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "any.png"}},
			"2": {"class_type": "ImageScaleBy", "inputs": {"image": ["1", 0], "upscale_method": "bicubic", "scale_by": 8}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "x"}}}`, ""},
		{"a prompt that does not plan", `{"1": {"class_type": "NoSuchNode", "inputs": {}}}`, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMemory(decodePrompt(t, tc.prompt), 512<<20)
			var me *MemoryError
			switch {
			case tc.node == "" && err != nil:
				t.Errorf("CheckMemory = %v, want nil", err)
			case tc.node != "" && (!errors.As(err, &me) || me.NodeID != tc.node || me.Limit != 512<<20):
				t.Errorf("CheckMemory = %v, want a MemoryError at node %s", err, tc.node)
			}
		})
	}
}

// TestRunsShareTheProcessBudget: a run that needs what another holds
// waits for it (and says so), and every byte is given back at the end.
func TestRunsShareTheProcessBudget(t *testing.T) {
	budget := membudget.New(4 << 20) // one run fits, two do not
	prompt := decodePrompt(t, `{
		"1": {"class_type": "EmptyImage", "inputs": {"width": 200, "height": 200, "batch_size": 1, "color": 0}},
		"2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}`) // 480 KB of tensor, 2.4 MB to save it
	holding, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	var first error
	wg.Go(func() {
		first = Execute(context.Background(), prompt, Env{Memory: budget, OnOutput: func(context.Context, Output) error {
			close(holding)
			<-release
			return nil
		}})
	})
	<-holding
	waited := make(chan int64, 1)
	var second error
	wg.Go(func() {
		second = Execute(context.Background(), prompt, Env{Memory: budget,
			OnMemoryWait: func(need int64) { waited <- need; close(release) },
			OnOutput:     func(context.Context, Output) error { return nil }})
	})
	wg.Wait()
	if first != nil || second != nil {
		t.Fatalf("runs: %v, %v", first, second)
	}
	select {
	case need := <-waited:
		if need <= 200*200*12 {
			t.Errorf("waited for %d bytes", need)
		}
	default:
		t.Error("the second run did not wait for the first")
	}
	if budget.InUse() != 0 {
		t.Errorf("%d bytes of the budget still held", budget.InUse())
	}
}

// TestMemoryCharge is the accounting of one run against its bound and
// the process's budget.
func TestMemoryCharge(t *testing.T) {
	type step struct {
		charge, release int64
		err             string // "" = succeeds, "limit" or "busy"
		used, reserved  int64
	}
	cases := []struct {
		name           string
		budget, others int64 // the process's budget and what other runs hold of it
		limit, reserve int64
		steps          []step
	}{
		{"within the reservation", 100, 0, 0, 60, []step{{charge: 50, used: 50, reserved: 60}, {release: 20, used: 30, reserved: 60}, {charge: 30, used: 60, reserved: 60}}},
		{"grows from the budget", 100, 30, 0, 40, []step{{charge: 60, used: 60, reserved: 60}, {charge: 10, used: 70, reserved: 70}, {charge: 1, err: "busy", used: 70, reserved: 70}}},
		{"the job's bound", 1000, 0, 50, 10, []step{{charge: 50, used: 50, reserved: 50}, {charge: 1, err: "limit", used: 50, reserved: 50}}},
		{"the bound is at most the budget", 80, 0, 500, 0, []step{{charge: 81, err: "limit"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := membudget.New(tc.budget)
			if !b.TryAcquire(tc.others) {
				t.Fatal("setup")
			}
			m := newMemory(b, tc.limit)
			if err := m.reserve(context.Background(), tc.reserve, nil); err != nil {
				t.Fatal(err)
			}
			for i, s := range tc.steps {
				var err error
				if s.charge > 0 {
					err = m.charge(s.charge)
				}
				m.release(s.release)
				var me *MemoryError
				switch {
				case s.err == "" && err != nil, s.err != "" && !errors.As(err, &me), s.err == "busy" && !me.Busy, s.err == "limit" && me.Busy:
					t.Fatalf("step %d: %v, want %q", i, err, s.err)
				}
				if m.used != s.used || m.reserved != s.reserved {
					t.Fatalf("step %d: used %d reserved %d, want %d and %d", i, m.used, m.reserved, s.used, s.reserved)
				}
			}
			m.close()
			if b.InUse() != tc.others {
				t.Errorf("after close the budget holds %d, want the others' %d", b.InUse(), tc.others)
			}
		})
	}
}

// jpegWithOrientation is a 16×8 JPEG with an EXIF Orientation tag.
func jpegWithOrientation(t *testing.T, o byte) []byte {
	t.Helper()
	src := image.NewRGBA(image.Rect(0, 0, 16, 8))
	for i := range src.Pix {
		src.Pix[i] = 200
	}
	src.SetRGBA(0, 0, color.RGBA{0, 0, 0, 255})
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, src, nil); err != nil {
		t.Fatal(err)
	}
	tiff := []byte("MM\x00\x2a\x00\x00\x00\x08\x00\x01\x01\x12\x00\x03\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00")
	tiff[19] = o
	app1 := append([]byte("Exif\x00\x00"), tiff...)
	seg := []byte{0xFF, 0xE1, byte((len(app1) + 2) >> 8), byte(len(app1) + 2)}
	j := buf.Bytes()
	return append(append(append([]byte{}, j[:2]...), append(seg, app1...)...), j[2:]...)
}

// TestCostCoversWhatNodesAllocate runs every node once and compares what
// it allocated (the heap's count) with its cost: the cost may leave out
// only the small allocations (taps, kernels, row buffers), and must not
// overstate much.
func TestCostCoversWhatNodesAllocate(t *testing.T) {
	const small = 96 << 10 // what a cost may leave out
	src, err := newImage(2, 192, 256)
	if err != nil {
		t.Fatal(err)
	}
	for i := range src.Pix {
		src.Pix[i] = float32(i%251) / 251
	}
	other, _ := newImage(1, 100, 90)
	// Blur, save and preview work one frame after the other; their cost is one
	// frame's, whose garbage the next one's collection reclaims.
	frame := &Image{B: 1, H: src.H, W: src.W, C: 3, Pix: src.Pix[:src.H*src.W*3]}
	cases := []struct {
		class  string
		inputs map[string]any
	}{
		{"EmptyImage", map[string]any{"width": 300.0, "height": 200.0, "batch_size": 2.0, "color": 7.0}},
		{"ImageInvert", map[string]any{"image": src}},
		{"ImageScale", map[string]any{"image": src, "upscale_method": "bicubic", "width": 300.0, "height": 300.0, "crop": "center"}},
		{"ImageScale", map[string]any{"image": src, "upscale_method": "lanczos", "width": 100.0, "height": 400.0, "crop": "disabled"}},
		{"ImageScaleBy", map[string]any{"image": src, "upscale_method": "area", "scale_by": 0.5}},
		{"ImageCrop", map[string]any{"image": src, "width": 100.0, "height": 100.0, "x": 200.0, "y": 10.0}},
		{"ImageFlip", map[string]any{"image": src, "flip_method": "y-axis: horizontally"}},
		{"ImageRotate", map[string]any{"image": src, "rotation": "270 degrees"}},
		{"ImageBlur", map[string]any{"image": frame, "blur_radius": 5.0, "sigma": 2.0}},
		{"ImageBlend", map[string]any{"image1": src, "image2": other, "blend_factor": 0.5, "blend_mode": "overlay"}},
		{"SaveImage", map[string]any{"images": frame, "filename_prefix": "x"}},
		{"PreviewImage", map[string]any{"images": frame}},
		{"LoadImage", map[string]any{"image": "rgba.png"}},
		{"LoadImage", map[string]any{"image": "interlaced16.png"}},
		{"LoadImage", map[string]any{"image": "rotated.jpg"}},
		{"LoadImage", map[string]any{"image": "progressive.jpg"}},
	}
	noise := image.NewNRGBA(image.Rect(0, 0, 300, 200))
	for i := range noise.Pix {
		noise.Pix[i] = uint8(i * 31)
	}
	files := map[string][]byte{"rgba.png": encodePNG(t, noise), "interlaced16.png": bombs.PNG(300, 200, 2, 16, true),
		"rotated.jpg": jpegWithOrientation(t, 8), "progressive.jpg": bombs.JPEG(300, 200, 3, true)}
	for _, tc := range cases {
		t.Run(tc.class, func(t *testing.T) {
			env := Env{PromptJSON: []byte(`{"prompt":"ünïcødé"}`), OnOutput: func(context.Context, Output) error { return nil },
				OpenInput: sizedOpener(files)}
			c := nodeCallFor(t, tc.class, tc.inputs, env)
			_, cost, err := c.def.cost(c)
			if err != nil {
				t.Fatal(err)
			}
			allocated := bombs.HeapAllocated(func() {
				if _, err := c.def.run(c); err != nil {
					t.Error(err)
				}
			})
			if allocated > cost+small {
				t.Errorf("the node allocated %d bytes, its cost is %d", allocated, cost)
			}
			if float64(cost) > 1.5*float64(allocated)+float64(pngEncoderBytes) {
				t.Errorf("the cost %d overstates the %d bytes allocated", cost, allocated)
			}
		})
	}
}

// TestRunCollectsWhatItReleased: between nodes the heap holds what the run
// accounts, not the tensors it retired as well: they are collected once
// nothing references them. (A collection made while the retired results
// were still referenced freed nothing: a chain of 48 MiB tensors held two
// of them and the third's garbage.)
func TestRunCollectsWhatItReleased(t *testing.T) {
	const size = 48 << 20 // a 2048² image
	prompt := decodePrompt(t, `{
		"1": {"class_type": "EmptyImage", "inputs": {"width": 2048, "height": 2048, "batch_size": 1, "color": 0}},
		"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
		"3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
		"4": {"class_type": "ImageInvert", "inputs": {"image": ["3", 0]}},
		"5": {"class_type": "ImageInvert", "inputs": {"image": ["4", 0]}},
		"6": {"class_type": "PreviewImage", "inputs": {"images": ["5", 0]}}}`)
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	err := Execute(context.Background(), prompt, Env{Memory: membudget.New(256 << 20),
		OnOutput: func(context.Context, Output) error { return nil },
		OnStart: func(p Progress) {
			if p.NodesDone < 3 {
				return
			}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			// One tensor is live (the next node's input); allow a quarter
			// of another for the test's own allocations.
			if held := int64(m.HeapAlloc) - int64(base.HeapAlloc); held > size+size/4 {
				t.Errorf("before node %s the heap holds %d MiB more than before the run, want one %d MiB tensor", p.NodeID, held>>20, size>>20)
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
}
