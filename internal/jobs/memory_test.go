package jobs

import (
	"context"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/membudget"
	"github.com/comfygate/comfygate/internal/workflow"
)

// TestSubmitRefusesWhatNoJobCanHold: on a builtin pool, a workflow whose
// widgets alone need more memory than one job may hold is answered 422
// invalid_workflow naming the node, before anything is queued; what an
// input file decides is left to the run.
func TestSubmitRefusesWhatNoJobCanHold(t *testing.T) {
	e := newEnv(t)
	e.exec.Memory, e.exec.JobMemory = membudget.New(1<<30), 512<<20
	e.svc.Precheck = e.exec.Precheck
	e.addAsset(t, "acct", "a.png", func() []byte { _, b := testPNG(t); return b }())
	empty := func(w, h, batch int) map[string]node {
		return map[string]node{
			"1": {"EmptyImage", map[string]any{"width": w, "height": h, "batch_size": batch, "color": 0}},
			"2": {"ImageInvert", map[string]any{"image": link("1")}},
			"3": {"PreviewImage", map[string]any{"images": link("2")}},
		}
	}
	upscaled := invertGraph("a.png")
	upscaled["2"] = node{"ImageScaleBy", map[string]any{"image": link("1"), "upscale_method": "bicubic", "scale_by": 8}}
	cases := []struct {
		name  string
		graph map[string]node
		node  string // "" = accepted
	}{
		{"8192² with a batch", empty(8192, 8192, 2), "1"},
		{"8192² alone", empty(8192, 8192, 1), "1"},
		{"6000² inverted", empty(6000, 6000, 1), "2"},
		{"2048² inverted", empty(2048, 2048, 1), ""},
		{"an input scaled up", upscaled, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := e.svc.Submit(context.Background(), "acct", submitBody(t, tc.graph))
			if tc.node == "" {
				if err != nil {
					t.Fatalf("Submit = %v, want it accepted", err)
				}
				return
			}
			ae, ok := apierr.As(err)
			if !ok || ae.Status != 422 || ae.Code != "invalid_workflow" {
				t.Fatalf("Submit = %v, want 422 invalid_workflow", err)
			}
			ne, _ := ae.Details["node_errors"].(workflow.NodeErrors)
			if len(ne[tc.node]) != 1 || ne[tc.node][0].Reason != workflow.ReasonOverMemoryLimit {
				t.Errorf("node_errors = %+v, want %s over_memory_limit", ae.Details["node_errors"], tc.node)
			}
		})
	}
}
