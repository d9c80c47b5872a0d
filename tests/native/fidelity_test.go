package native

import (
	"net/http"
	"testing"
	"time"
)

// Fidelity to ComfyUI's own messages and records, through a real socket
// against the gateway binary (issue 26).

// dataOf is a message's data object.
func dataOf(m map[string]any) map[string]any {
	d, _ := m["data"].(map[string]any)
	return d
}

// ofPrompt keeps the messages of one prompt.
func ofPrompt(msgs []map[string]any, id string) []map[string]any {
	var out []map[string]any
	for _, m := range msgs {
		if promptOf(m) == id {
			out = append(out, m)
		}
	}
	return out
}

// TestPreviewIsTemp: a PreviewImage output is a temp file, in the executed
// message, in /history, and /view serves it as such.
func TestPreviewIsTemp(t *testing.T) {
	g := startBuiltin(t)
	c := newClient(t, g, "native-a")
	ws := c.dial("preview-client")
	prompt := map[string]any{
		"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 255}},
		"2": map[string]any{"class_type": "PreviewImage", "inputs": map[string]any{"images": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "saved", "images": []any{"1", 0}}},
	}
	id := c.queue(prompt, "preview-client")
	msgs := ofPrompt(ws.until(t, "execution_success", id, 30*time.Second), id)
	types := map[string]string{}
	for _, m := range msgs {
		if m["type"] != "executed" {
			continue
		}
		d := dataOf(m)
		images, _ := dataOf(map[string]any{"data": d["output"]})["images"].([]any)
		for _, im := range images {
			types[d["node"].(string)] = im.(map[string]any)["type"].(string)
		}
	}
	if want := map[string]string{"2": "temp", "3": "output"}; !maps(types, want) {
		t.Errorf("executed messages: types by node %v, want %v", types, want)
	}
	e := c.waitHistory(id, 10*time.Second)
	if got := e.Outputs["2"]["images"]; len(got) != 1 || got[0]["type"] != "temp" {
		t.Errorf("history outputs of PreviewImage %v, want one temp image", got)
	}
	if got := e.Outputs["3"]["images"]; len(got) != 1 || got[0]["type"] != "output" {
		t.Errorf("history outputs of SaveImage %v, want one output image", got)
	}
	if got := e.Outputs["2"]["images"]; len(got) == 1 {
		if r := c.view(got[0]); r.Status != http.StatusOK {
			t.Errorf("/view of the preview: %d %s", r.Status, r.Body)
		}
	}
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
