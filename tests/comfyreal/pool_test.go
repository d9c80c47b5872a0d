package comfyreal

import (
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/comfyreal/realcomfy"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestPoolOnRealComfyUI (issue 39, acceptance 1; issue 37, acceptance 4):
// a pool of two unmodified ComfyUI servers (upstream 5b69cfe7, which
// ignores a client's prompt_id) runs invert, scale, preview, an execution
// error, a cancel, 20 concurrent jobs and a worker killed mid-prompt; the
// outputs equal what the same ComfyUI writes when sent the prompt
// directly, and every prompt is executed exactly once. The servers are
// shared by the subtests, which run in order.
func TestPoolOnRealComfyUI(t *testing.T) {
	s := startStack(t)
	src := gateway.GradientPNG(t, 32)
	asset := s.upload(t, src, "gradient.png")

	t.Run("validation from the real object_info", func(t *testing.T) {
		before := s.counts()
		for name, wf := range map[string]map[string]any{
			"unknown class": {"1": gateway.Node("NoSuchNode", map[string]any{})},
			"combo value not offered": {
				"1": loadAsset(asset),
				"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "cubic", "width": 8, "height": 8, "crop": "disabled"}),
				"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}}),
			},
			"above the real maximum": {
				"1": loadAsset(asset),
				"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "bilinear", "width": 16385, "height": 8, "crop": "disabled"}),
				"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}}),
			},
		} {
			r := s.submit(t, wf)
			if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "invalid_workflow") {
				t.Errorf("%s: %d %s, want 422 invalid_workflow", name, r.Status, r.Body)
			}
		}
		// A value the real catalog offers (and the peer's does not) passes.
		ok := s.submitOK(t, map[string]any{
			"1": loadAsset(asset),
			"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "lanczos", "width": 16, "height": 16, "crop": "center"}),
			"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}, "filename_prefix": "lanczos"}),
		})
		if j := s.finish(t, ok); j["status"] != "succeeded" {
			t.Errorf("a lanczos scale ended %v: %v", j["status"], j["error"])
		}
		s.onceEach(t, before, 1, 1)
	})

	for _, tc := range []struct {
		name string
		wf   map[string]any
		node string
	}{
		{"invert", map[string]any{
			"2": gateway.Node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
			"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}, "filename_prefix": "inv"}),
		}, "3"},
		{"scale", map[string]any{
			"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "bilinear", "width": 48, "height": 40, "crop": "disabled"}),
			"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}, "filename_prefix": "scaled"}),
		}, "3"},
		{"preview", map[string]any{
			"2": gateway.Node("ImageBlur", map[string]any{"image": []any{"1", 0}, "blur_radius": 2, "sigma": 1.0}),
			"3": gateway.Node("PreviewImage", map[string]any{"images": []any{"2", 0}}),
		}, "3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := s.reference(t, tc.wf, src, tc.node)
			before := s.counts()
			wf := map[string]any{"1": loadAsset(asset)}
			for id, n := range tc.wf {
				wf[id] = n
			}
			id := s.submitOK(t, wf)
			events := gateway.ReadEvents(t, s.g.URL+"/api/v2/jobs/"+id+"/events", 3*time.Minute)
			j := s.finish(t, id)
			if j["status"] != "succeeded" {
				t.Fatalf("job ended %v: %v", j["status"], j["error"])
			}
			if p := j["progress"].(map[string]any); p["value"] != 1.0 || p["nodes_done"] != p["nodes_total"] || p["nodes_total"] != 3.0 {
				t.Errorf("final progress %v, want 3/3 nodes", p)
			}
			if n := gateway.CountEvents(t, events); n["output"] != 1 || n["progress"] == 0 {
				t.Errorf("events %v, want progress and one output", n)
			}
			sameImage(t, s.output(t, j, tc.node), want)
			s.onceEach(t, before, 1, 1)
		})
	}

	t.Run("execution error", func(t *testing.T) {
		before := s.counts()
		// Bytes that are no image under a .png name: ComfyUI accepts the
		// prompt (the file exists) and fails loading it (5b69cfe7's Pillow
		// helper then fails on its own UnboundLocalError: a real
		// exception either way, with its traceback through nodes.py).
		cut := s.upload(t, []byte("these bytes are not an image"), "cut.png")
		id := s.submitOK(t, map[string]any{
			"1": loadAsset(cut),
			"2": gateway.Node("SaveImage", map[string]any{"images": []any{"1", 0}, "filename_prefix": "cut"}),
		})
		j := s.finish(t, id)
		e, _ := j["error"].(map[string]any)
		tb, _ := e["traceback"].(string)
		if j["status"] != "failed" || e["code"] != "node_execution_error" || e["node_id"] != "1" || e["class_type"] != "LoadImage" ||
			e["message"] == "" || !strings.Contains(tb, "nodes.py") {
			t.Errorf("job %v error %v, want node_execution_error of LoadImage with the traceback", j["status"], e)
		}
		s.onceEach(t, before, 1, 1)
	})

	t.Run("cancel reaches /interrupt", func(t *testing.T) {
		before := s.counts()
		id := s.submitOK(t, slowWorkflow(asset, 12))
		s.until(t, "the prompt running on a worker", time.Minute, func() bool { return s.running(t) != nil })
		if r := gateway.Do(t, http.MethodPost, s.g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
			t.Fatalf("cancel: %d %s", r.Status, r.Body)
		}
		if j := s.finish(t, id); j["status"] != "canceled" {
			t.Fatalf("job ended %v, want canceled", j["status"])
		}
		s.onceEach(t, before, 1, 1)
		if d := s.since(before); d.interrupted != 1 {
			t.Errorf("%d prompts interrupted on the workers, want 1", d.interrupted)
		}
		for _, w := range s.workers {
			if wroteOutputs(w, id) {
				t.Errorf("the canceled job wrote outputs on %s", w.URL)
			}
		}
	})

	t.Run("20 concurrent jobs over both workers", func(t *testing.T) {
		tail := map[string]any{
			"2": gateway.Node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
			"3": gateway.Node("SaveImage", map[string]any{"images": []any{"2", 0}, "filename_prefix": "many"}),
		}
		want := s.reference(t, tail, src, "3")
		before := s.counts()
		ids := make([]string, 20)
		var wg sync.WaitGroup
		for i := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[i] = s.submitOK(t, map[string]any{"1": loadAsset(asset), "2": tail["2"], "3": tail["3"]})
			}()
		}
		wg.Wait()
		perWorker := make([]int, len(s.workers))
		for _, id := range ids {
			j := s.finish(t, id)
			if j["status"] != "succeeded" {
				t.Fatalf("job %s ended %v: %v", id, j["status"], j["error"])
			}
			sameImage(t, s.output(t, j, "3"), want)
			for i, w := range s.workers {
				if wroteOutputs(w, id) {
					perWorker[i]++
				}
			}
		}
		if perWorker[0]+perWorker[1] != 20 || perWorker[0] == 0 || perWorker[1] == 0 {
			t.Errorf("jobs per worker %v: want all 20, spread over both", perWorker)
		}
		s.onceEach(t, before, 20, 20)
	})

	// ComfyUI installs no SIGTERM handler: a SIGTERM ends it at once, as a
	// SIGKILL does, with no shutdown notice on its sockets. Either way the
	// worker leaves the rotation at its next dial (long before
	// unhealthy_after), and its job finishes on the other worker.
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGTERM} {
		t.Run(sig.String()+" of the worker mid-prompt", func(t *testing.T) {
			before := s.counts()
			id := s.submitOK(t, slowWorkflow(asset, 6))
			var victim *realcomfy.Server
			s.until(t, "the prompt running on a worker", time.Minute, func() bool { victim = s.running(t); return victim != nil })
			victim.Signal(sig)
			stopped := time.Now()
			var reason string
			s.until(t, "the stopped worker unhealthy", 15*time.Second, func() bool {
				w := s.workerStates(t)[victim.URL]
				reason = w.UnhealthyReason
				return !w.Healthy && w.UnhealthyReason != "" && !w.Draining
			})
			t.Logf("unhealthy %v after the signal: %s", time.Since(stopped).Round(time.Millisecond), reason)
			j := s.finish(t, id)
			if j["status"] != "succeeded" {
				t.Fatalf("job ended %v: %v", j["status"], j["error"])
			}
			other := s.other(victim)
			if !wroteOutputs(other, id) || wroteOutputs(victim, id) {
				t.Errorf("the job's outputs are not (only) on the surviving worker")
			}
			// Two prompts (one per attempt); only the second ran to its end.
			s.onceEach(t, before, 2, 1)
			if sig == syscall.SIGKILL { // the next subtest needs both workers
				victim.Restart(t)
				s.until(t, "the restarted worker healthy", time.Minute, func() bool { return s.workerStates(t)[victim.URL].Healthy })
			}
		})
	}
}
