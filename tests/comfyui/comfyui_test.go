package comfyui

import (
	"bytes"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestJobsOnPeers covers acceptance 1 and 3: success with images and a
// text output, progress that only grows, previews on SSE, execution_error,
// validation from the workers' /object_info, cancel while queued and while
// running, inputs staged once per job, outputs as the account's assets.
func TestJobsOnPeers(t *testing.T) {
	s := startStack(t)
	g := s.g
	src := gateway.GradientPNG(t, 32)
	assetID := uploadAsset(t, g, src, "peer_input.png")

	t.Run("success with images, text, progress and previews", func(t *testing.T) {
		wf := map[string]any{
			"1": node("LoadImage", map[string]any{"image": "peer_input.png"}),
			"2": node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
			"3": node("SaveImage", map[string]any{"filename_prefix": "it", "images": []any{"2", 0}}),
			"4": node("LoadImage", map[string]any{"image": map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": assetID}}}),
			"5": node("SaveImage", map[string]any{"filename_prefix": "copy", "images": []any{"4", 0}}),
			"6": node("TextOutput", map[string]any{"text": "hello from the peer"}),
			"7": node("SlowNode", map[string]any{"steps": 20, "step_ms": 50}),
			"8": node("PreviewNode", map[string]any{"frames": 6, "step_ms": 200}),
		}
		before := s.peers[0].Stats().Uploads + s.peers[1].Stats().Uploads
		id := submitOK(t, g, wf)
		events := gateway.ReadEvents(t, g.URL+"/api/v2/jobs/"+id+"/events", 2*time.Minute)
		n := gateway.CountEvents(t, events)
		previews, outputs := n["preview"], n["output"]
		if previews == 0 {
			t.Error("no preview on the event stream")
		}
		if outputs != 3 {
			t.Errorf("%d output events, want 3", outputs)
		}
		j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal)
		if j["status"] != "succeeded" {
			t.Fatalf("job ended %v: %v", j["status"], j["error"])
		}
		if p := j["progress"].(map[string]any); p["value"] != 1.0 || p["nodes_done"] != p["nodes_total"] {
			t.Errorf("final progress %v", p)
		}
		byNode := map[string]map[string]any{}
		for _, o := range j["outputs"].([]any) {
			om := o.(map[string]any)
			if byNode[om["node_id"].(string)] != nil {
				t.Errorf("node %s has two outputs", om["node_id"])
			}
			byNode[om["node_id"].(string)] = om
		}
		img := byNode["3"]
		if img == nil || img["type"] != "image" || img["content_type"] != "image/png" || img["job_id"] != id {
			t.Fatalf("image output %v", img)
		}
		content := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/assets/"+img["id"].(string)+"/content", nil, nil)
		checkInverted(t, src, content.Body)
		txt := byNode["6"]
		if txt == nil || txt["type"] != "text" {
			t.Fatalf("text output %v", txt)
		}
		if body := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/assets/"+txt["id"].(string)+"/content", nil, nil).Body; string(body) != "hello from the peer" {
			t.Errorf("text content %q", body)
		}
		asset := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/assets/"+txt["id"].(string), nil, nil).JSON(t)
		if asset["job_id"] != id {
			t.Errorf("text asset %v does not belong to the job", asset)
		}
		// One asset referenced twice is staged once, into the job's subfolder.
		if n := s.peers[0].Stats().Uploads + s.peers[1].Stats().Uploads - before; n != 1 {
			t.Errorf("%d uploads for one job, want 1", n)
		}
		staged := append(s.peers[0].Inputs(), s.peers[1].Inputs()...)
		found := false
		for _, in := range staged {
			found = found || strings.HasPrefix(in, "comfygate/"+id+"/")
		}
		if !found {
			t.Errorf("staged inputs %v lack the job's subfolder", staged)
		}
		until(t, "the prompt's history deleted", func() bool {
			return len(s.peers[0].HistoryIDs())+len(s.peers[1].HistoryIDs()) == 0
		})
	})

	t.Run("execution_error", func(t *testing.T) {
		id := submitOK(t, g, map[string]any{"5": node("FailNode", map[string]any{"message": "kaboom"})})
		j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal)
		e, _ := j["error"].(map[string]any)
		if j["status"] != "failed" || e["code"] != "node_execution_error" || e["node_id"] != "5" || e["class_type"] != "FailNode" ||
			!strings.Contains(e["message"].(string), "kaboom") || !strings.Contains(e["traceback"].(string), "RuntimeError") {
			t.Errorf("job %v error %v", j["status"], e)
		}
	})

	t.Run("validation from object_info", func(t *testing.T) {
		for name, wf := range map[string]map[string]any{
			"unknown class": {"1": node("NoSuchNode", map[string]any{})},
			"bad combo": {
				"1": node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
				"2": node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "nope", "width": 4, "height": 4, "crop": "disabled"}),
				"3": node("SaveImage", map[string]any{"filename_prefix": "x", "images": []any{"2", 0}}),
			},
		} {
			r := submit(t, g, wf)
			if r.Status != http.StatusUnprocessableEntity || !strings.Contains(string(r.Body), "invalid_workflow") {
				t.Errorf("%s: %d %s", name, r.Status, r.Body)
			}
		}
	})

	t.Run("cancel while queued and while running", func(t *testing.T) {
		running := []string{submitOK(t, g, slowText(400, 50, "a")), submitOK(t, g, slowText(400, 50, "b"))}
		queued := submitOK(t, g, slowText(400, 50, "c"))
		for _, id := range running {
			gateway.WaitJob(t, g.URL, id, time.Minute, func(s string) bool { return s == "running" })
		}
		if st := getJob(t, g, queued)["status"]; st != "queued" {
			t.Fatalf("third job %v, want queued", st)
		}
		interrupts := s.peers[0].Stats().Interrupts + s.peers[1].Stats().Interrupts
		for _, id := range append([]string{queued}, running...) {
			if r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
				t.Fatalf("cancel: %d %s", r.Status, r.Body)
			}
		}
		for _, id := range append([]string{queued}, running...) {
			if j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal); j["status"] != "canceled" {
				t.Errorf("job %s ended %v", id, j["status"])
			}
		}
		if n := s.peers[0].Stats().Interrupts + s.peers[1].Stats().Interrupts - interrupts; n != 2 {
			t.Errorf("%d interrupts for two running jobs", n)
		}
		until(t, "both peers idle", func() bool { return s.running() == nil })
	})
}

func checkInverted(t *testing.T, src, got []byte) {
	t.Helper()
	a, _ := png.Decode(bytes.NewReader(src))
	b, err := png.Decode(bytes.NewReader(got))
	if err != nil {
		t.Fatalf("output is not a PNG: %v", err)
	}
	for y := 0; y < a.Bounds().Dy(); y += 3 {
		for x := 0; x < a.Bounds().Dx(); x += 3 {
			r0, g0, _, _ := a.At(x, y).RGBA()
			r1, g1, _, _ := b.At(x, y).RGBA()
			if uint8(r1>>8) != gateway.ComfyInvert(uint8(r0>>8)) || uint8(g1>>8) != gateway.ComfyInvert(uint8(g0>>8)) {
				t.Fatalf("pixel %d,%d not inverted", x, y)
			}
		}
	}
}
