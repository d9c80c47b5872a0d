package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestJobsOnBuiltin runs LoadImage → ImageInvert → SaveImage on the
// built-in executor, by file name and by core/ASSET reference, and checks
// the job resource, its output asset, the workflow route and the list.
func TestJobsOnBuiltin(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			g := startGateway(t, b)
			in := gateway.GradientPNG(t, 64)
			up := upload(t, g, nil, uploadParts(in, "gradient.png")...)
			if up.Status != http.StatusCreated {
				t.Fatalf("upload: %d %s", up.Status, up.Body)
			}
			assetID := up.JSON(t)["id"].(string)
			ref := map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": assetID}}

			for name, image := range map[string]any{"by name": "gradient.png", "by asset": ref} {
				t.Run(name, func(t *testing.T) {
					r := submit(t, g, map[string]any{"workflow": invertWorkflow(image)}, map[string]string{"Idempotency-Key": uuid.NewString()})
					if r.Status != http.StatusCreated {
						t.Fatalf("submit: %d %s", r.Status, r.Body)
					}
					j := r.JSON(t)
					id := j["id"].(string)
					for _, k := range []string{"id", "status", "created_at", "started_at", "completed_at", "expires_at", "queue_position", "progress", "outputs", "error", "urls", "metrics"} {
						if _, ok := j[k]; !ok {
							t.Errorf("job lacks %q: %s", k, r.Body)
						}
					}
					if _, ok := j["logs"]; ok {
						t.Error("a self-hosted job carries logs")
					}
					urls := j["urls"].(map[string]any)
					if urls["self"] != g.URL+"/api/v2/jobs/"+id || urls["events"] != g.URL+"/api/v2/jobs/"+id+"/events" {
						t.Errorf("urls: %v", urls)
					}
					done := gateway.WaitJob(t, g.URL, id, 60*time.Second, gateway.Terminal)
					if done["status"] != "succeeded" {
						t.Fatalf("job ended %v: %v", done["status"], done["error"])
					}
					m := done["metrics"].(map[string]any)
					if m["queue_ms"] == nil || m["execution_ms"] == nil {
						t.Errorf("metrics of a finished job: %v", m)
					}
					if p := done["progress"].(map[string]any); p["value"] != 1.0 || p["nodes_done"] != 3.0 || p["nodes_total"] != 3.0 {
						t.Errorf("final progress: %v", p)
					}
					outs := done["outputs"].([]any)
					if len(outs) != 1 {
						t.Fatalf("outputs: %v", outs)
					}
					o := outs[0].(map[string]any)
					if o["node_id"] != "3" || o["type"] != "image" || o["content_type"] != "image/png" || o["job_id"] != id {
						t.Errorf("output: %v", o)
					}
					content := do(t, http.MethodGet, o["url"].(string), nil, nil)
					img, err := png.Decode(bytes.NewReader(content.Body))
					if err != nil {
						t.Fatalf("output is not a PNG: %v", err)
					}
					checkInverted(t, img, 64)
					asset := do(t, http.MethodGet, g.URL+"/api/v2/assets/"+o["id"].(string), nil, nil).JSON(t)
					if asset["job_id"] != id {
						t.Errorf("output asset's job_id: %v", asset["job_id"])
					}
					// The output is held while the job is retained.
					if r := do(t, http.MethodDelete, g.URL+"/api/v2/assets/"+o["id"].(string), nil, nil); r.Status != http.StatusConflict || r.errorCode(t) != "asset_in_use" {
						t.Errorf("delete of a retained output: %d %s", r.Status, r.Body)
					}
					wf := do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+id+"/workflow", nil, nil).JSON(t)
					if wf["format"] != "api" || wf["workflow"].(map[string]any)["2"] == nil {
						t.Errorf("workflow: %v", wf)
					}
				})
			}

			t.Run("list", func(t *testing.T) {
				r := do(t, http.MethodGet, g.URL+"/api/v2/jobs?status=succeeded&limit=1", nil, nil)
				page := r.JSON(t)
				if len(page["jobs"].([]any)) != 1 || page["next_cursor"] == nil {
					t.Fatalf("first page: %s", r.Body)
				}
				r2 := do(t, http.MethodGet, g.URL+"/api/v2/jobs?status=succeeded&limit=1&cursor="+page["next_cursor"].(string), nil, nil)
				page2 := r2.JSON(t)
				if len(page2["jobs"].([]any)) != 1 || page2["next_cursor"] != nil {
					t.Fatalf("last page: %s", r2.Body)
				}
				if page["jobs"].([]any)[0].(map[string]any)["id"] == page2["jobs"].([]any)[0].(map[string]any)["id"] {
					t.Error("a job appears on two pages")
				}
				// A listed job is the Job object, outputs included.
				for _, p := range []map[string]any{page, page2} {
					listed := p["jobs"].([]any)[0].(map[string]any)
					outs, _ := listed["outputs"].([]any)
					if len(outs) != 1 || outs[0].(map[string]any)["url"] == nil {
						t.Errorf("a listed succeeded job's outputs: %v", listed["outputs"])
					}
				}
				for _, q := range []string{"status=nope", "limit=0", "limit=101", "cursor=%%%"} {
					if r := do(t, http.MethodGet, g.URL+"/api/v2/jobs?"+q, nil, nil); r.Status != 400 {
						t.Errorf("%s: %d", q, r.Status)
					}
				}
			})
		})
	}
}

func checkInverted(t *testing.T, img image.Image, size int) {
	t.Helper()
	if b := img.Bounds(); b.Dx() != size || b.Dy() != size {
		t.Fatalf("output is %v, want %dx%d", b, size, size)
	}
	for y := 0; y < size; y++ {
		for x := 0; x < size; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			want := [3]uint8{gateway.ComfyInvert(uint8(x)), gateway.ComfyInvert(uint8(y)), gateway.ComfyInvert(uint8(x*7 + y*13))}
			got := [3]uint8{uint8(r >> 8), uint8(g >> 8), uint8(bl >> 8)}
			if got != want {
				t.Fatalf("pixel %d,%d = %v, want %v", x, y, got, want)
			}
		}
	}
}

// TestSubmitRefusals: each refusal has its status, code and detail, writes
// no job, and releases the idempotency key.
func TestSubmitRefusals(t *testing.T) {
	b := backends()[0]
	g := startGateway(t, b)
	deep := strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000)
	var many strings.Builder
	many.WriteString(`{"workflow":{`)
	for i := 0; i < 100000; i++ {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `"%d":{"class_type":"ImageInvert","inputs":{}}`, i)
	}
	many.WriteString(`}}`)
	cycle := map[string]any{
		"1": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"2", 0}}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "x", "images": []any{"2", 0}}},
	}
	unknown := slowWorkflow(1)
	unknown["2"] = map[string]any{"class_type": "NoSuchNode", "inputs": map[string]any{}}
	cases := []struct {
		name   string
		body   string
		status int
		code   string
		node   string // node_errors key to expect, if any
		reason string
	}{
		{"not JSON", "{", 400, "invalid_request", "", ""},
		{"UI format", `{"workflow":{"nodes":[],"links":[],"last_node_id":1}}`, 422, "workflow_format_ui", "", ""},
		{"webhook_url", `{"workflow":{},"webhook_url":"https://x"}`, 422, "invalid_workflow", "", ""},
		{"unknown extra_data", `{"workflow":{},"extra_data":{"client_id":"x"}}`, 422, "invalid_workflow", "", ""},
		{"unknown class", mustJSON(map[string]any{"workflow": unknown}), 422, "invalid_workflow", "2", "missing_node_type"},
		{"cycle", mustJSON(map[string]any{"workflow": cycle}), 422, "invalid_workflow", "1", "cycle"},
		{"missing asset by name", mustJSON(map[string]any{"workflow": invertWorkflow("nobody.png")}), 422, "missing_asset", "1", "missing_asset"},
		{"missing asset by id", mustJSON(map[string]any{"workflow": invertWorkflow(map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": uuid.NewString()}})}), 422, "missing_asset", "1", "missing_asset"},
		{"10000-deep nesting", `{"workflow":{"1":` + deep + `}}`, 422, "invalid_workflow", "", ""},
		{"100000 nodes", many.String(), 422, "invalid_workflow", "", ""},
		{"10 MiB body", `{"workflow":{"1":{"class_type":"` + strings.Repeat("a", 10<<20) + `"}}}`, 413, "payload_too_large", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			key := uuid.NewString()
			start := time.Now()
			r := do(t, http.MethodPost, g.URL+"/api/v2/jobs", strings.NewReader(c.body), map[string]string{"Idempotency-Key": key, "Content-Type": "application/json"})
			elapsed := time.Since(start)
			if r.Status != c.status || r.errorCode(t) != c.code {
				t.Fatalf("got %d %.300s, want %d %s", r.Status, r.Body, c.status, c.code)
			}
			if c.node != "" {
				details, _ := r.JSON(t)["error"].(map[string]any)["details"].(map[string]any)
				ne, _ := details["node_errors"].(map[string]any)
				entries, _ := ne[c.node].([]any)
				found := false
				for _, e := range entries {
					if e.(map[string]any)["reason"] == c.reason {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s error on node %s: %s", c.reason, c.node, r.Body)
				}
			}
			t.Logf("refused in %s", elapsed)
			// Nothing was queued and the key is free again.
			ok := submit(t, g, map[string]any{"workflow": slowWorkflow(0)}, map[string]string{"Idempotency-Key": key})
			if ok.Status != http.StatusCreated {
				t.Fatalf("the released key was refused: %d %s", ok.Status, ok.Body)
			}
		})
	}
	list := do(t, http.MethodGet, g.URL+"/api/v2/jobs?limit=100", nil, nil).JSON(t)
	if n := len(list["jobs"].([]any)); n != len(cases) {
		t.Errorf("%d jobs exist, want only the %d good retries", n, len(cases))
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
