package native

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"
)

// TestInterruptNamesNode: a prompt interrupted during its third node
// reports that node and the two before it, in execution_interrupted and
// in the history's status messages, with ComfyUI's keys.
func TestInterruptNamesNode(t *testing.T) {
	g := startBuiltin(t)
	c := newClient(t, g, "native-a")
	ws := c.dial("interrupt-client")
	// The third node runs long enough to be interrupted while it runs.
	prompt := map[string]any{
		"1":  map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 64, "height": 64, "batch_size": 1, "color": 0}},
		"2":  map[string]any{"class_type": "ImageScale", "inputs": map[string]any{"image": []any{"1", 0}, "upscale_method": "nearest-exact", "width": 3072, "height": 3072, "crop": "disabled"}},
		"5":  map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{"2", 0}, "blur_radius": 31, "sigma": 10}},
		"9":  map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"5", 0}}},
		"99": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "int", "images": []any{"9", 0}}},
	}
	id := c.queue(prompt, "interrupt-client")
	for {
		m := ws.next(t, 30*time.Second)
		if promptOf(m) == id && m["type"] == "executing" && dataOf(m)["node"] == "5" {
			break
		}
		if promptOf(m) == id && (m["type"] == "execution_success" || m["type"] == "execution_error") {
			t.Fatalf("the prompt ended before its third node was announced: %v", m)
		}
	}
	c.json(http.MethodPost, "/interrupt", map[string]any{"prompt_id": id}, nil)
	msgs := ofPrompt(ws.until(t, "execution_interrupted", id, 30*time.Second), id)
	check := func(where string, d map[string]any) {
		t.Helper()
		if d["node_id"] != "5" || d["node_type"] != "ImageBlur" || d["prompt_id"] != id {
			t.Errorf("%s: node_id %v node_type %v prompt_id %v, want 5 ImageBlur %s", where, d["node_id"], d["node_type"], d["prompt_id"], id)
		}
		var executed []string
		list, _ := d["executed"].([]any)
		for _, e := range list {
			executed = append(executed, fmt.Sprint(e))
		}
		slices.Sort(executed)
		if !slices.Equal(executed, []string{"1", "2"}) {
			t.Errorf("%s: executed %v, want [1 2]", where, d["executed"])
		}
		if _, ok := d["timestamp"].(float64); !ok {
			t.Errorf("%s: no timestamp in %v", where, d)
		}
	}
	check("execution_interrupted", dataOf(msgs[len(msgs)-1]))
	var h map[string]struct {
		Status struct {
			StatusStr string               `json:"status_str"`
			Messages  [][2]json.RawMessage `json:"messages"`
		} `json:"status"`
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.json(http.MethodGet, "/history/"+id, nil, &h)
		if _, ok := h[id]; ok {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	found := false
	for _, m := range h[id].Status.Messages {
		var ev string
		json.Unmarshal(m[0], &ev)
		if ev != "execution_interrupted" {
			continue
		}
		found = true
		var d map[string]any
		json.Unmarshal(m[1], &d)
		check("history", d)
	}
	if !found {
		t.Errorf("history status %+v has no execution_interrupted", h[id].Status)
	}
}

// TestNoStatusBeforeInterrupted: ComfyUI sends status when its queue
// changes, after a prompt's end; a client that reads /queue on every
// status (the saintno SDK) must not find an interrupted prompt gone before
// it reads execution_interrupted (it reported "The job went missing!").
// The socket's keepalive status may fall in that window by chance, so a
// run with one is retried; one clean run of three passes.
func TestNoStatusBeforeInterrupted(t *testing.T) {
	g := startBuiltin(t)
	c := newClient(t, g, "native-a")
	var seen []map[string]any
	for attempt := range 3 {
		clientID := fmt.Sprintf("status-%d", attempt)
		ws := c.dial(clientID)
		id := c.queue(slow(), clientID)
		for {
			m := ws.next(t, 30*time.Second)
			if promptOf(m) == id && m["type"] == "executing" && dataOf(m)["node"] == "11" {
				break
			}
		}
		c.json(http.MethodPost, "/interrupt", map[string]any{"prompt_id": id}, nil)
		seen = nil
		for _, m := range ws.until(t, "execution_interrupted", id, 30*time.Second) {
			if m["type"] == "status" {
				seen = append(seen, m)
			}
		}
		ws.conn.CloseNow()
		if len(seen) == 0 {
			return
		}
	}
	t.Errorf("status messages between the interrupt and execution_interrupted in each of 3 runs, the last: %v", seen)
}
