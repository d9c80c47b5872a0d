package builtin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"image"
	"image/color"
	"image/png"
	"slices"
	"strings"
	"testing"
)

// decodePrompt builds a prompt the way the gateway will: from JSON.
func decodePrompt(t *testing.T, js string) map[string]Node {
	t.Helper()
	var raw map[string]struct {
		ClassType string         `json:"class_type"`
		Inputs    map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal([]byte(js), &raw); err != nil {
		t.Fatal(err)
	}
	p := make(map[string]Node, len(raw))
	for id, n := range raw {
		p[id] = Node{ClassType: n.ClassType, Inputs: n.Inputs}
	}
	return p
}

const invertPrompt = `{
 "1": {"class_type": "LoadImage", "inputs": {"image": "gradient.png"}},
 "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
 "3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "ComfyUI"}},
 "9": {"class_type": "ImageFlip", "inputs": {"image": ["1", 0], "flip_method": "x-axis: vertically"}}
}`

func gradientPNG(t *testing.T) []byte {
	t.Helper()
	src := image.NewNRGBA(image.Rect(0, 0, 512, 512))
	for y := 0; y < 512; y++ {
		for x := 0; x < 512; x++ {
			src.SetNRGBA(x, y, color.NRGBA{uint8(x / 2), uint8(y / 2), uint8((x + y) / 4), 255})
		}
	}
	return encodePNG(t, src)
}

func TestExecuteLoadInvertSave(t *testing.T) {
	in := gradientPNG(t)
	prompt := decodePrompt(t, invertPrompt)
	var progress []Progress
	var outputs []Output
	env := Env{
		OpenInput:  opener(map[string][]byte{"gradient.png": in}),
		PromptJSON: []byte(invertPrompt),
		OnProgress: func(p Progress) { progress = append(progress, p) },
		OnOutput: func(_ context.Context, o Output) error {
			if len(progress) != 2 {
				t.Errorf("output delivered after %d finished nodes, want 2 (before SaveImage finishes)", len(progress))
			}
			outputs = append(outputs, o)
			return nil
		},
	}
	if err := Execute(context.Background(), prompt, env); err != nil {
		t.Fatal(err)
	}
	// The unconnected ImageFlip (node 9) is not an output's ancestor: it must not run.
	wantIDs := []string{"1", "2", "3"}
	var ids []string
	for i, p := range progress {
		ids = append(ids, p.NodeID)
		if p.NodesDone != i+1 || p.NodesTotal != 3 || p.Steps != 0 || p.ClassType != prompt[p.NodeID].ClassType {
			t.Fatalf("progress %d = %+v", i, p)
		}
	}
	if !slices.Equal(ids, wantIDs) {
		t.Fatalf("executed %v, want %v", ids, wantIDs)
	}
	if len(outputs) != 1 || outputs[0].Filename != "ComfyUI_00001_.png" || outputs[0].NodeID != "3" {
		t.Fatalf("outputs %+v", outputs)
	}
	got, err := png.Decode(bytes.NewReader(outputs[0].Data))
	if err != nil {
		t.Fatal(err)
	}
	if got.Bounds() != image.Rect(0, 0, 512, 512) {
		t.Fatalf("output bounds %v", got.Bounds())
	}
	for y := 0; y < 512; y++ {
		for x := 0; x < 512; x++ {
			r, g, b, a := got.At(x, y).RGBA()
			want := [3]uint8{invertModel(uint8(x / 2)), invertModel(uint8(y / 2)), invertModel(uint8((x + y) / 4))}
			if [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8)} != want || a != 0xFFFF {
				t.Fatalf("pixel (%d,%d): got %d,%d,%d want %v", x, y, r>>8, g>>8, b>>8, want)
			}
		}
	}
	if texts := readTextChunks(t, outputs[0].Data); texts["prompt"] != invertPrompt {
		t.Fatalf("prompt chunk %q", texts["prompt"])
	}
}

func TestExecuteRunsSharedNodesOnce(t *testing.T) {
	prompt := decodePrompt(t, `{
	 "1": {"class_type": "EmptyImage", "inputs": {"width": 4, "height": 4, "batch_size": 1, "color": 16711680}},
	 "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
	 "10": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "a"}},
	 "4": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "a"}},
	 "5": {"class_type": "PreviewImage", "inputs": {"images": ["1", 0]}}
	}`)
	var done []string
	var names []string
	err := Execute(context.Background(), prompt, Env{
		OnProgress: func(p Progress) { done = append(done, p.NodeID) },
		OnOutput:   func(_ context.Context, o Output) error { names = append(names, o.Type+":"+o.Filename); return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(done, []string{"1", "2", "4", "5", "10"}) {
		t.Fatalf("execution order %v", done)
	}
	// Two SaveImage nodes with one prefix share the job's counter.
	if len(names) != 3 || names[0] != "output:a_00001_.png" || names[2] != "output:a_00002_.png" || !strings.HasPrefix(names[1], "temp:ComfyUI_temp_") {
		t.Fatalf("outputs %v", names)
	}
}

// TestExecuteDropsOutputsAfterLastReader: a node's outputs are kept exactly
// until the last node that links to them has run (a chain of big images
// must not hold one image per node), links read twice by one node included.
func TestExecuteDropsOutputsAfterLastReader(t *testing.T) {
	prompt := decodePrompt(t, `{
	 "1": {"class_type": "EmptyImage", "inputs": {"width": 4, "height": 4, "batch_size": 1, "color": 255}},
	 "2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
	 "3": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
	 "4": {"class_type": "ImageBlend", "inputs": {"image1": ["3", 0], "image2": ["1", 0], "blend_factor": 0.5, "blend_mode": "normal"}},
	 "5": {"class_type": "SaveImage", "inputs": {"images": ["4", 0], "filename_prefix": "a"}},
	 "6": {"class_type": "PreviewImage", "inputs": {"images": ["2", 0]}},
	 "7": {"class_type": "ImageBlend", "inputs": {"image1": ["1", 0], "image2": ["1", 0], "blend_factor": 0.5, "blend_mode": "multiply"}},
	 "8": {"class_type": "SaveImage", "inputs": {"images": ["7", 0], "filename_prefix": "b"}}
	}`)
	order, err := plan(prompt)
	if err != nil {
		t.Fatal(err)
	}
	r := newRun(prompt, Env{}, len(order))
	held := map[string][]string{}
	r.env.OnOutput = func(context.Context, Output) error { return nil }
	r.env.OnProgress = func(p Progress) {
		ids := []string{}
		for id := range r.results {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		held[p.NodeID] = ids
	}
	if err := r.all(context.Background(), order); err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"1": {"1"}, "2": {"1", "2"}, "3": {"1", "2", "3"}, "4": {"1", "2", "4"},
		"5": {"1", "2"}, "6": {"1"}, "7": {"7"}, "8": {},
	}
	if !slices.Equal(order, []string{"1", "2", "3", "4", "5", "6", "7", "8"}) {
		t.Fatalf("order %v", order)
	}
	for _, id := range order {
		if !slices.Equal(held[id], want[id]) {
			t.Errorf("after node %s the run holds the outputs of %v, want %v", id, held[id], want[id])
		}
	}
}

func TestExecuteCancellationBetweenNodes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var done []string
	outputs := 0
	err := Execute(ctx, decodePrompt(t, invertPrompt), Env{
		OpenInput: opener(map[string][]byte{"gradient.png": gradientPNG(t)}),
		OnProgress: func(p Progress) {
			done = append(done, p.NodeID)
			if p.NodeID == "1" {
				cancel()
			}
		},
		OnOutput: func(context.Context, Output) error { outputs++; return nil },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if !slices.Equal(done, []string{"1"}) || outputs != 0 {
		t.Fatalf("ran %v and delivered %d outputs after cancel", done, outputs)
	}
}

func TestExecuteErrors(t *testing.T) {
	corrupt := append(append([]byte{}, gradientPNG(t)[:100]...), bytes.Repeat([]byte{0xAB}, 50)...)
	files := map[string][]byte{"gradient.png": corrupt, "text.png": []byte("not an image at all")}
	deliveryFailed := errors.New("storage down")
	tests := []struct {
		name      string
		prompt    string
		onOutput  func(context.Context, Output) error
		wantNode  string
		wantClass string
		wantMsg   string
		wantErr   error
	}{
		{name: "corrupt png", prompt: invertPrompt, wantNode: "1", wantClass: "LoadImage", wantMsg: "gradient.png"},
		{name: "not an image", prompt: `{"1":{"class_type":"LoadImage","inputs":{"image":"text.png"}},"2":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}}`, wantNode: "1", wantClass: "LoadImage", wantMsg: "cannot identify"},
		{name: "missing file", prompt: `{"1":{"class_type":"LoadImage","inputs":{"image":"nope.png"}},"2":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}}`, wantNode: "1", wantClass: "LoadImage", wantMsg: "Invalid image file: nope.png"},
		// An asset reference is named as one, not by its internal marker (a NUL byte).
		{name: "missing asset", prompt: `{"1":{"class_type":"LoadImage","inputs":{"image":"\u0000asset:0190-a"}},"2":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}}`, wantNode: "1", wantClass: "LoadImage", wantMsg: "Invalid image file: asset 0190-a: "},
		{name: "unknown class", prompt: `{"1":{"class_type":"KSampler","inputs":{}},"2":{"class_type":"SaveImage","inputs":{"images":["1",0],"filename_prefix":"x"}}}`, wantNode: "1", wantClass: "KSampler", wantMsg: "does not exist"},
		{name: "link to missing node", prompt: `{"2":{"class_type":"SaveImage","inputs":{"images":["7",0],"filename_prefix":"x"}}}`, wantNode: "2", wantClass: "SaveImage", wantMsg: "missing node 7"},
		{name: "bad slot", prompt: `{"1":{"class_type":"EmptyImage","inputs":{"width":1,"height":1,"batch_size":1,"color":0}},"2":{"class_type":"SaveImage","inputs":{"images":["1",3],"filename_prefix":"x"}}}`, wantNode: "2", wantClass: "SaveImage", wantMsg: "no output slot 3"},
		{name: "mask into image input", prompt: `{"1":{"class_type":"LoadImage","inputs":{"image":"ok.png"}},"2":{"class_type":"SaveImage","inputs":{"images":["1",1],"filename_prefix":"x"}}}`, wantNode: "2", wantClass: "SaveImage", wantMsg: "received MASK, expected IMAGE"},
		{name: "cycle", prompt: `{"1":{"class_type":"ImageInvert","inputs":{"image":["2",0]}},"2":{"class_type":"ImageInvert","inputs":{"image":["1",0]}},"3":{"class_type":"SaveImage","inputs":{"images":["2",0],"filename_prefix":"x"}}}`, wantNode: "2", wantClass: "ImageInvert", wantMsg: "cycle"},
		{name: "no outputs", prompt: `{"1":{"class_type":"ImageInvert","inputs":{}}}`, wantErr: ErrNoOutputs},
		{name: "delivery failure is not a node error", prompt: `{"1":{"class_type":"EmptyImage","inputs":{"width":1,"height":1,"batch_size":1,"color":0}},"2":{"class_type":"SaveImage","inputs":{"images":["1",0],"filename_prefix":"x"}}}`,
			onOutput: func(context.Context, Output) error { return deliveryFailed }, wantErr: deliveryFailed},
	}
	okPNG := encodePNG(t, image.NewGray(image.Rect(0, 0, 1, 1)))
	files["ok.png"] = okPNG
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Execute(context.Background(), decodePrompt(t, tc.prompt), Env{OpenInput: opener(files), OnOutput: tc.onOutput})
			if tc.wantErr != nil {
				var ne *NodeError
				if !errors.Is(err, tc.wantErr) || errors.As(err, &ne) {
					t.Fatalf("got %v, want %v and no NodeError", err, tc.wantErr)
				}
				return
			}
			var ne *NodeError
			if !errors.As(err, &ne) {
				t.Fatalf("got %v (%T), want *NodeError", err, err)
			}
			if ne.NodeID != tc.wantNode || ne.ClassType != tc.wantClass || !strings.Contains(ne.Message, tc.wantMsg) {
				t.Fatalf("got %+v, want node %s (%s) with %q", ne, tc.wantNode, tc.wantClass, tc.wantMsg)
			}
		})
	}
}

func TestObjectInfo(t *testing.T) {
	var info map[string]struct {
		Input struct {
			Required map[string][]json.RawMessage `json:"required"`
			Hidden   map[string]string            `json:"hidden"`
		} `json:"input"`
		InputOrder  map[string][]string `json:"input_order"`
		Output      []string            `json:"output"`
		OutputName  []string            `json:"output_name"`
		OutputNode  *bool               `json:"output_node"`
		Category    string              `json:"category"`
		Name        string              `json:"name"`
		DisplayName string              `json:"display_name"`
	}
	if err := json.Unmarshal(ObjectInfo(), &info); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{
		"LoadImage": false, "SaveImage": true, "PreviewImage": true, "EmptyImage": false, "ImageInvert": false,
		"ImageScale": false, "ImageScaleBy": false, "ImageCrop": false, "ImageFlip": false, "ImageRotate": false,
		"ImageBlur": false, "ImageBlend": false,
	}
	if len(info) != len(want) {
		t.Fatalf("%d nodes, want %d", len(info), len(want))
	}
	for name, outNode := range want {
		n, ok := info[name]
		if !ok {
			t.Fatalf("missing %s", name)
		}
		if n.OutputNode == nil || *n.OutputNode != outNode || n.Name != name || n.DisplayName == "" || n.Category == "" {
			t.Fatalf("%s: %+v", name, n)
		}
		if len(n.InputOrder["required"]) != len(n.Input.Required) || !slices.Equal(n.Output, n.OutputName) {
			t.Fatalf("%s: inconsistent input_order/output_name", name)
		}
		if outNode != (len(n.Output) == 0) {
			t.Fatalf("%s: output nodes here return nothing, others return IMAGE", name)
		}
		if outNode && (n.Input.Hidden["prompt"] != "PROMPT" || n.Input.Hidden["extra_pnginfo"] != "EXTRA_PNGINFO") {
			t.Fatalf("%s: hidden inputs %v", name, n.Input.Hidden)
		}
	}
	checks := []struct{ node, input, want string }{
		{"LoadImage", "image", `[[],{"image_upload":true}]`},
		{"ImageFlip", "flip_method", `[["x-axis: vertically","y-axis: horizontally"]]`},
		{"ImageScale", "width", `["INT",{"default":512,"max":16384,"min":0,"step":1}]`},
		{"EmptyImage", "color", `["INT",{"default":0,"display":"color","max":16777215,"min":0,"step":1}]`},
		{"ImageScaleBy", "scale_by", `["FLOAT",{"default":1,"max":8,"min":0.01,"step":0.01}]`},
		{"ImageBlend", "blend_mode", `[["normal","multiply","screen","overlay","soft_light","difference"],{}]`},
		{"ImageInvert", "image", `["IMAGE"]`},
	}
	for _, c := range checks {
		raw, _ := json.Marshal(info[c.node].Input.Required[c.input])
		if string(raw) != c.want {
			t.Errorf("%s.%s = %s, want %s", c.node, c.input, raw, c.want)
		}
	}
	if !slices.Equal(info["LoadImage"].Output, []string{"IMAGE", "MASK"}) {
		t.Fatalf("LoadImage outputs %v", info["LoadImage"].Output)
	}
}
