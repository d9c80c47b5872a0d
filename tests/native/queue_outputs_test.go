package native

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// outputsToExecute decodes a queue tuple's fifth element.
func outputsToExecute(t *testing.T, item []json.RawMessage) []string {
	t.Helper()
	if len(item) != 5 {
		t.Fatalf("queue item has %d elements, want 5", len(item))
	}
	var out []string
	if err := json.Unmarshal(item[4], &out); err != nil {
		t.Fatalf("outputs_to_execute %s: %v", item[4], err)
	}
	return out
}

// TestOutputsToExecute: the fifth element of a /queue item and of a
// history entry's prompt lists the prompt's output nodes, as ComfyUI's
// does, whether they ran yet or not.
func TestOutputsToExecute(t *testing.T) {
	g := startBuiltin(t)
	c := newClient(t, g, "native-a")
	slowID := c.queue(slow(), "")
	// A second prompt waits behind the first (one built-in slot).
	c.upload("oe.png", gateway.GradientPNG(t, 8))
	pendingID := c.queue(invert("oe.png"), "")
	var q struct {
		Running [][]json.RawMessage `json:"queue_running"`
		Pending [][]json.RawMessage `json:"queue_pending"`
	}
	c.json(http.MethodGet, "/queue", nil, &q)
	seen := 0
	for _, item := range append(q.Running, q.Pending...) {
		var id string
		json.Unmarshal(item[1], &id)
		want := map[string][]string{slowID: {"99"}, pendingID: {"3"}}[id]
		if want == nil {
			continue
		}
		seen++
		if got := outputsToExecute(t, item); !slices.Equal(got, want) {
			t.Errorf("/queue item %s: outputs_to_execute %v, want %v", id, got, want)
		}
	}
	if seen == 0 {
		t.Fatalf("neither prompt in /queue: %+v", q)
	}
	c.json(http.MethodPost, "/interrupt", map[string]any{}, nil)
	e := c.waitHistory(pendingID, 30*time.Second)
	if got := outputsToExecute(t, e.Prompt); !slices.Equal(got, []string{"3"}) {
		t.Errorf("history prompt of %s: outputs_to_execute %v, want [3]", pendingID, got)
	}
	e = c.waitHistory(slowID, 30*time.Second)
	if got := outputsToExecute(t, e.Prompt); !slices.Equal(got, []string{"99"}) {
		t.Errorf("history prompt of the interrupted %s: outputs_to_execute %v, want [99]", slowID, got)
	}
}
