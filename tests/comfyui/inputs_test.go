package comfyui

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestStagedInputsRemovedThroughGateway covers the second half of
// acceptance 3 for a gateway given its workers' input directories
// (input_dir in the Caddyfile): a job's staged inputs are written into
// <input_dir>/comfygate/<job id> on the worker, and that folder is gone once
// the job has ended (succeeded: by the time the end is recorded; canceled
// while running: once the prompt stopped on the worker).
func TestStagedInputsRemovedThroughGateway(t *testing.T) {
	s, dirs := startStackWithInputDirs(t)
	g := s.g
	src := gateway.GradientPNG(t, 16)
	assetID := uploadAsset(t, g, src, "staged_input.png")
	asset := map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": assetID}}
	// stagedAt is the folder of the job's inputs on whichever worker has it.
	stagedAt := func(id string) []string {
		var found []string
		for _, dir := range dirs {
			p := filepath.Join(dir, "comfygate", id)
			if _, err := os.Stat(p); err == nil {
				found = append(found, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
		}
		return found
	}

	tests := []struct {
		name       string
		workflow   map[string]any
		cancel     bool
		wantStatus string
	}{
		{
			name: "succeeded",
			workflow: map[string]any{
				"1": node("LoadImage", map[string]any{"image": asset}),
				"2": node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
				"3": node("SaveImage", map[string]any{"filename_prefix": "inv", "images": []any{"2", 0}}),
			},
			wantStatus: "succeeded",
		},
		{
			name: "canceled while running",
			workflow: map[string]any{
				"1": node("LoadImage", map[string]any{"image": asset}),
				"2": node("SaveImage", map[string]any{"filename_prefix": "c", "images": []any{"1", 0}}),
				"3": node("SlowNode", map[string]any{"steps": 400, "step_ms": 50}),
			},
			cancel:     true,
			wantStatus: "canceled",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			uploads := s.peers[0].Stats().Uploads + s.peers[1].Stats().Uploads
			id := submitOK(t, g, tc.workflow)
			if tc.cancel {
				gateway.WaitJob(t, g.URL, id, time.Minute, func(st string) bool { return st == "running" })
				until(t, "the prompt running on a peer", func() bool { return s.running() != nil })
				if at := stagedAt(id); len(at) != 1 {
					t.Fatalf("while running, the job's input folder is at %v, want on one worker", at)
				}
				if r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
					t.Fatalf("cancel: %d %s", r.Status, r.Body)
				}
			}
			j := gateway.WaitJob(t, g.URL, id, time.Minute, gateway.Terminal)
			if j["status"] != tc.wantStatus {
				t.Fatalf("job ended %v (%v), want %s", j["status"], j["error"], tc.wantStatus)
			}
			if n := s.peers[0].Stats().Uploads + s.peers[1].Stats().Uploads - uploads; n != 1 {
				t.Fatalf("%d uploads, want the input staged once", n)
			}
			if tc.cancel {
				// A cancel is recorded at once; the attempt stops on the
				// worker (and removes its inputs) a moment later.
				until(t, "the canceled job's inputs removed", func() bool { return len(stagedAt(id)) == 0 })
			} else if at := stagedAt(id); len(at) != 0 {
				// A finished attempt removes its inputs before the job's end
				// is recorded.
				t.Errorf("the job ended %s but its staged inputs remain at %v", tc.wantStatus, at)
			}
			if tc.wantStatus == "succeeded" {
				// The worker read the staged file from its input directory.
				out := j["outputs"].([]any)[0].(map[string]any)
				checkInverted(t, src, gateway.Do(t, http.MethodGet, g.URL+"/api/v2/assets/"+out["id"].(string)+"/content", nil, nil).Body)
			}
		})
	}
}
