package native

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// sequenceRuns is how many prompts TestMessageSequence runs; set
// NATIVE_SEQUENCE_RUNS to run more (the race it guards showed in about
// half of the runs).
func sequenceRuns(t *testing.T) int {
	if s := os.Getenv("NATIVE_SEQUENCE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("NATIVE_SEQUENCE_RUNS=%q", s)
		}
		return n
	}
	return 10
}

// progressProblems checks one prompt's progress messages as a client that
// draws each node's progress reads them, for a prompt without sampler
// steps (the value counts the nodes done): each names the node announced
// last by executing (the node it is about), with a max above 0, and its
// value rises strictly (never the last one again, not even for the next
// node).
func progressProblems(msgs []map[string]any) []string {
	var problems []string
	var node any
	last := -1.0
	for _, m := range msgs {
		d := dataOf(m)
		switch m["type"] {
		case "executing":
			if d["node"] != nil {
				node = d["node"]
			}
		case "progress":
			v, _ := d["value"].(float64)
			if mx, _ := d["max"].(float64); v <= last || mx <= 0 || d["node"] == nil || d["node"] != node {
				problems = append(problems, fmt.Sprintf("progress %v/%v of node %v after %v, node %v running", v, d["max"], d["node"], last, node))
			}
			last = v
		}
	}
	return problems
}

// checkSequence checks one prompt's messages as a per-node progress client
// reads them: execution_start once; executing for each node in want, in
// order, each once, then executing null once, last; progress messages as
// progressProblems wants them.
func checkSequence(msgs []map[string]any, want []string) error {
	var nodes []string
	problems := progressProblems(msgs)
	nulls, starts := 0, 0
	for i, m := range msgs {
		d := dataOf(m)
		switch m["type"] {
		case "execution_start":
			starts++
		case "executing":
			if d["node"] == nil {
				nulls++
				if i != len(msgs)-1 {
					problems = append(problems, fmt.Sprintf("executing null is not the last message: %v", msgs[i+1:]))
				}
				continue
			}
			nodes = append(nodes, d["node"].(string))
		}
	}
	if starts != 1 || nulls != 1 || !slices.Equal(nodes, want) {
		problems = append(problems, fmt.Sprintf("execution_start ×%d, executing %v then null ×%d; want 1, %v, 1", starts, nodes, nulls, want))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return nil
}

// TestMessageSequence: every node that runs gets its executing message,
// exactly once and in order, then executing null once, after the
// queue's status that follows execution_success; each progress
// names its node and never repeats the last value. Each run queues a prompt on a socket opened
// just before, the way a client does; the first node (LoadImage or
// EmptyImage) used to be skipped in about half of the runs.
func TestMessageSequence(t *testing.T) {
	g := startBuiltin(t)
	c := newClient(t, g, "native-a")
	c.upload("seq.png", gateway.GradientPNG(t, 16))
	empty := map[string]any{
		"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 16, "height": 16, "batch_size": 1, "color": 0}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "PreviewImage", "inputs": map[string]any{"images": []any{"2", 0}}},
	}
	failures := 0
	runs := sequenceRuns(t)
	for i := range runs {
		prompt := invert("seq.png")
		if i%2 == 1 {
			prompt = empty
		}
		clientID := fmt.Sprintf("seq-%d", i)
		ws := c.dial(clientID)
		id := c.queue(prompt, clientID)
		raw := ws.until(t, "execution_success", id, 30*time.Second)
		raw = append(raw, ws.drain(300*time.Millisecond)...)
		msgs := ofPrompt(raw, id)
		err := checkSequence(msgs, []string{"1", "2", "3"})
		if err == nil {
			err = endsAsComfyUI(raw, id)
		}
		if err != nil {
			failures++
			t.Errorf("run %d: %v", i, err)
			if os.Getenv("NATIVE_SEQUENCE_DUMP") != "" {
				for _, m := range msgs {
					t.Logf("  %v", m)
				}
			}
		}
		ws.conn.CloseNow()
	}
	t.Logf("%d of %d runs with a wrong sequence", failures, runs)
}
