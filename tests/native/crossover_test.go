package native

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

const size = 32

// TestNativeJobsInV2: a prompt queued through the ComfyUI front is an
// ordinary v2 job — listed, polled and streamed under /api/v2/jobs.
func TestNativeJobsInV2(t *testing.T) {
	t.Parallel()
	g := startBuiltin(t)
	a := newClient(t, g, "crossover-a")
	a.upload("in.png", gateway.GradientPNG(t, size))
	id := a.queue(invert("in.png"), "c-1")

	var list struct {
		Jobs []map[string]any `json:"jobs"`
	}
	a.json(http.MethodGet, "/api/v2/jobs", nil, &list)
	if !slices.ContainsFunc(list.Jobs, func(j map[string]any) bool { return j["id"] == id }) {
		t.Fatalf("GET /api/v2/jobs does not list prompt %s: %v", id, list.Jobs)
	}
	job := waitV2(t, a, id)
	if job["status"] != "succeeded" {
		t.Fatalf("job %v", job)
	}
	outs := job["outputs"].([]any)
	if len(outs) != 1 {
		t.Fatalf("v2 outputs %v", outs)
	}
	// The v2 output's bytes are what /view serves for the history's file.
	entry := a.waitHistory(id, 10*time.Second)
	viewed := a.view(only(t, entry))
	content := a.do(http.MethodGet, "/api/v2/assets/"+outs[0].(map[string]any)["id"].(string)+"/content", nil)
	if viewed.Status != 200 || content.Status != 200 || !bytes.Equal(viewed.Body, content.Body) {
		t.Fatalf("/view %d and v2 content %d differ", viewed.Status, content.Status)
	}
	checkInverted(t, viewed.Body, size)
	// Every route is also served under /api, as ComfyUI serves it.
	if h := a.history("/api/history/" + id); len(h[id].Outputs) != 1 {
		t.Fatalf("/api/history/{id} = %v", h)
	}
	var q map[string]any
	a.json(http.MethodGet, "/api/queue", nil, &q)
	if _, ok := q["queue_running"]; !ok {
		t.Fatalf("/api/queue = %v", q)
	}

	// The v2 event stream of the native job ends with its terminal status.
	req, _ := http.NewRequest(http.MethodGet, g.URL+"/api/v2/jobs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+a.key)
	resp, err := (&http.Client{Timeout: 20 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	events, err := gateway.ParseEvents(resp.Body, nil)
	if err != nil || len(events) == 0 {
		t.Fatalf("events: %v %v", events, err)
	}
	if last := events[len(events)-1]; last.Name != "status" || last.Data["status"] != "succeeded" {
		t.Fatalf("last event %v", last)
	}
}

func waitV2(t *testing.T, c *client, id string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var j map[string]any
		c.json(http.MethodGet, "/api/v2/jobs/"+id, nil, &j)
		if gateway.Terminal(j["status"].(string)) {
			return j
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("job %s did not end", id)
	return nil
}

// TestV2JobsInHistory: a job submitted through /api/v2/jobs appears in the
// ComfyUI front's /history once finished, and its output is served by
// /view; POST /history delete and clear hide prompts from /history only.
func TestV2JobsInHistory(t *testing.T) {
	t.Parallel()
	g := startBuiltin(t)
	a := newClient(t, g, "history-a")
	a.upload("in.png", gateway.GradientPNG(t, size))
	body, _ := json.Marshal(map[string]any{"workflow": invert("in.png")})
	r := a.do(http.MethodPost, "/api/v2/jobs", body)
	if r.Status != http.StatusCreated {
		t.Fatalf("v2 submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	waitV2(t, a, id)
	entry := a.waitHistory(id, 10*time.Second)
	if entry.Status.StatusStr != "success" || !entry.Status.Completed {
		t.Fatalf("history status %+v", entry.Status)
	}
	if h := a.history("/history?max_items=10"); len(h) != 1 {
		t.Fatalf("/history lists %d prompts, want the v2 job", len(h))
	}
	checkInverted(t, a.view(only(t, entry)).Body, size)

	// A second job, then: delete hides the first, clear hides the rest.
	native := a.queue(invert("in.png"), "")
	a.waitHistory(native, 10*time.Second)
	a.json(http.MethodPost, "/history", map[string]any{"delete": []string{id}}, nil)
	h := a.history("/history")
	if _, hidden := h[id]; hidden || len(h) != 1 {
		t.Fatalf("after delete /history = %v, want only %s", keys(h), native)
	}
	if len(a.history("/history/"+id)) != 0 {
		t.Fatal("/history/{id} still shows a deleted prompt")
	}
	a.json(http.MethodPost, "/history", map[string]any{"clear": true}, nil)
	if h := a.history("/history"); len(h) != 0 {
		t.Fatalf("after clear /history = %v", keys(h))
	}
	// The jobs themselves are untouched.
	for _, j := range []string{id, native} {
		var job map[string]any
		a.json(http.MethodGet, "/api/v2/jobs/"+j, nil, &job)
		if job["status"] != "succeeded" || len(job["outputs"].([]any)) != 1 {
			t.Fatalf("v2 job %s after the history was cleared: %v", j, job)
		}
	}
	// A prompt finished after the clear shows again.
	later := a.queue(invert("in.png"), "")
	a.waitHistory(later, 10*time.Second)
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
