package comfyui_test

import (
	"bytes"
	"context"
	"errors"
	"image/png"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/jobs"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// successGraph loads one asset twice (by handle and by file name), inverts
// it, saves it, and emits a text, a video and an audio output.
const successGraph = `{
	"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "in1"}}}},
	"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
	"3": {"class_type": "SaveImage", "inputs": {"filename_prefix": "inv", "images": ["2", 0]}},
	"4": {"class_type": "LoadImage", "inputs": {"image": "in1.png"}},
	"5": {"class_type": "SaveImage", "inputs": {"images": ["4", 0]}},
	"6": {"class_type": "TextOutput", "inputs": {"text": "hello"}},
	"7": {"class_type": "MediaOutput", "inputs": {"filename_prefix": "clip"}},
	"8": {"class_type": "SlowNode", "inputs": {"steps": 5, "step_ms": 10}}
}`

func TestExecuteSuccess(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	pool := newPool(t, 1, peer)
	src := gradientPNG(t, 16, 8)
	run, rec := newRun(t, successGraph, map[string][]byte{"in1": src})
	if err := pool.Execute(context.Background(), run); err != nil {
		t.Fatalf("Execute: %v", err)
	}
	progress, _, outputs := rec.snapshot()

	kinds := map[string]int{}
	for _, o := range outputs {
		kinds[o.NodeID+":"+o.Type]++
		if o.Type != "text" && o.Subfolder != run.Job.ID {
			t.Errorf("output %s in subfolder %q, want the job's prefix %q", o.Name, o.Subfolder, run.Job.ID)
		}
	}
	want := map[string]int{"3:image": 1, "5:image": 1, "6:text": 1, "7:video": 1, "7:audio": 1}
	if len(kinds) != len(want) {
		t.Fatalf("outputs %v, want %v", kinds, want)
	}
	for k, n := range want {
		if kinds[k] != n {
			t.Errorf("outputs %v, want %v", kinds, want)
		}
	}
	for _, o := range outputs {
		switch {
		case o.NodeID == "6":
			if string(o.data) != "hello" || !strings.HasPrefix(o.ContentType, "text/plain") {
				t.Errorf("text output %q (%s)", o.data, o.ContentType)
			}
		case o.NodeID == "3":
			checkInverted(t, src, o.data)
		case o.NodeID == "7" && o.Type == "video":
			if o.ContentType != "video/mp4" {
				t.Errorf("video content type %s", o.ContentType)
			}
		}
	}

	last := -1.0
	for _, p := range progress {
		if p.Value < last {
			t.Fatalf("progress went back from %v to %v", last, p.Value)
		}
		last = p.Value
	}
	if final := progress[len(progress)-1]; final.Value != 1 || final.NodesDone != final.NodesTotal || final.NodesTotal != 8 {
		t.Errorf("final progress %+v, want value 1 and 8/8 nodes", final)
	}
	sawSteps := false
	for _, p := range progress {
		if p.Steps != nil && *p.Steps == 5 {
			sawSteps = true
		}
	}
	if !sawSteps {
		t.Error("no progress carried the SlowNode's steps")
	}

	st := peer.Stats()
	if st.Uploads != 1 {
		t.Errorf("uploads = %d, want 1 (one asset referenced twice)", st.Uploads)
	}
	if in := peer.Inputs(); len(in) != 1 || in[0] != "comfygate/"+run.Job.ID+"/in1.png" {
		t.Errorf("staged inputs %v, want the job's subfolder", in)
	}
	eventually(t, "history deleted", func() bool { return len(peer.HistoryIDs()) == 0 && peer.Stats().HistoryDeletes == 1 })
}

func checkInverted(t *testing.T, src, got []byte) {
	t.Helper()
	a, err := png.Decode(bytes.NewReader(src))
	if err != nil {
		t.Fatal(err)
	}
	b, err := png.Decode(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("output is not a PNG: %v", err)
	}
	if a.Bounds() != b.Bounds() {
		t.Fatalf("size %v, want %v", b.Bounds(), a.Bounds())
	}
	for y := a.Bounds().Min.Y; y < a.Bounds().Max.Y; y++ {
		for x := a.Bounds().Min.X; x < a.Bounds().Max.X; x++ {
			r0, _, _, _ := a.At(x, y).RGBA()
			r1, _, _, _ := b.At(x, y).RGBA()
			if uint8(r1>>8) != comfyInvert(uint8(r0>>8)) {
				t.Fatalf("pixel %d,%d red %d, want %d", x, y, r1>>8, comfyInvert(uint8(r0>>8)))
			}
		}
	}
}

func TestExecuteFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		graph     string
		switches  func(*comfyuipeer.Switches)
		code      string
		nodeID    string
		class     string
		inMessage string
	}{
		{
			name:  "execution_error",
			graph: `{"1": {"class_type": "FailNode", "inputs": {"message": "out of cheese"}}}`,
			code:  "node_execution_error", nodeID: "1", class: "FailNode", inMessage: "out of cheese",
		},
		{
			name:     "400 with node_errors",
			graph:    `{"1": {"class_type": "TextOutput", "inputs": {"text": "x"}}}`,
			switches: func(s *comfyuipeer.Switches) { s.NodeErrors400 = true },
			code:     "invalid_workflow", nodeID: "1", class: "TextOutput", inMessage: "Value not in list",
		},
		{
			name:     "200 with node_errors",
			graph:    `{"1": {"class_type": "SlowNode", "inputs": {"steps": 100, "step_ms": 50}}}`,
			switches: func(s *comfyuipeer.Switches) { s.NodeErrors200 = true },
			code:     "invalid_workflow", nodeID: "1", class: "SlowNode", inMessage: "filename_prefix",
		},
		{
			name:  "missing asset",
			graph: `{"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "gone"}}}}, "2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0]}}}`,
			code:  "missing_asset", nodeID: "1", class: "LoadImage", inMessage: "does not exist",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			peer := comfyuipeer.New(t, comfyuipeer.Options{})
			if tc.switches != nil {
				peer.Set(tc.switches)
			}
			pool := newPool(t, 1, peer)
			run, rec := newRun(t, tc.graph, nil)
			err := pool.Execute(context.Background(), run)
			var ne *jobs.NodeError
			if !errors.As(err, &ne) {
				t.Fatalf("Execute = %v, want a NodeError", err)
			}
			if ne.Code != tc.code || ne.NodeID != tc.nodeID || ne.ClassType != tc.class || !strings.Contains(ne.Message, tc.inMessage) {
				t.Errorf("error %+v, want code %s node %s class %s message with %q", ne, tc.code, tc.nodeID, tc.class, tc.inMessage)
			}
			if tc.code == "node_execution_error" && !strings.Contains(ne.Traceback, "RuntimeError") {
				t.Errorf("traceback %q", ne.Traceback)
			}
			if _, _, outs := rec.snapshot(); len(outs) != 0 {
				t.Errorf("outputs %v after a failure", outs)
			}
			if tc.name == "200 with node_errors" {
				// ComfyUI queued the prompt anyway; the pool took it back.
				eventually(t, "the queued prompt stopped", func() bool {
					st := peer.Stats()
					return peer.Running() == "" && st.QueueDeletes+st.Interrupts >= 1
				})
			}
		})
	}
}

func TestPreviews(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	pool := newPool(t, 1, peer)
	run, rec := newRun(t, `{"9": {"class_type": "PreviewNode", "inputs": {"frames": 8, "step_ms": 150}}}`, nil)
	if err := pool.Execute(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	_, previews, _ := rec.snapshot()
	if len(previews) < 2 || len(previews) > 8 {
		t.Fatalf("previews %v: want throttled previews of 8 frames", previews)
	}
	for _, p := range previews {
		if p != "9 image/png" {
			t.Errorf("preview %q, want node 9 image/png", p)
		}
	}
}
