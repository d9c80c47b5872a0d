package native

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestLateSocket: a socket that connects with a prompt's client id while
// the prompt runs gets what ComfyUI sends it: the running node's
// executing at once (after the first status), then the rest of the prompt
// (each later node's executing once, in order, the output's executed, the
// end), and nothing of what ran before it connected (no execution_start,
// no earlier node). The socket it replaces gets nothing more. The prompt
// ends as ComfyUI ends one: execution_success, the queue's status,
// executing null. On the built-in pool and on a ComfyUI-peer pool.
func TestLateSocket(t *testing.T) {
	t.Parallel()
	t.Run("builtin", func(t *testing.T) {
		t.Parallel()
		g := startBuiltin(t)
		order := []string{"1"}
		for i := 10; i < 60; i++ {
			order = append(order, fmt.Sprint(i))
		}
		testLateSocket(t, g, slow(), append(order, "99"), "12")
	})
	t.Run("comfyui-peer", func(t *testing.T) {
		t.Parallel()
		peer := comfyuipeer.New(t, comfyuipeer.Options{})
		peer.Set(func(sw *comfyuipeer.Switches) { sw.Slow = 300 * time.Millisecond })
		g := gateway.Start(t, gateway.NativeConfig("storage embedded ./data\n\t\tpool gpu comfyui {\n\t\t\tworker "+peer.URL+"\n\t\t}", "gpu"), gateway.Options{})
		prompt := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
			"inputs": map[string]any{"width": 16, "height": 16, "batch_size": 1, "color": 0}}}
		order, prev := []string{"1"}, "1"
		for i := 2; i < 9; i++ {
			id := fmt.Sprint(i)
			prompt[id] = map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{prev, 0}}}
			order, prev = append(order, id), id
		}
		prompt["9"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "late", "images": []any{prev, 0}}}
		testLateSocket(t, g, prompt, append(order, "9"), "3")
	})
}

// testLateSocket queues prompt (whose nodes run in order) on one socket
// and connects a second one with the same client id once the first saw
// node after's executing.
func testLateSocket(t *testing.T, g *gateway.Gateway, prompt map[string]any, order []string, after string) {
	c := newClient(t, g, "late")
	const clientID = "late-client"
	early := c.dial(clientID)
	id := c.queue(prompt, clientID)
	for {
		m := early.next(t, 60*time.Second)
		if m["type"] == "executing" && dataOf(m)["node"] == after {
			break
		}
	}
	late := c.dial(clientID)
	msgs := late.until(t, "execution_success", id, 2*time.Minute)
	msgs = append(msgs, late.drain(500*time.Millisecond)...)

	// What the replaced socket received after the late one connected.
	for _, m := range early.drain(200 * time.Millisecond) {
		if m["type"] == "execution_success" || (m["type"] == "executing" && dataOf(m)["node"] == nil) {
			t.Errorf("the replaced socket still got %v", m)
		}
	}

	first := ofPrompt(msgs, id)
	if len(first) == 0 || first[0]["type"] != "executing" {
		t.Fatalf("the late socket's first message of the prompt is not executing: %v", msgs)
	}
	running, _ := dataOf(first[0])["node"].(string)
	at := slices.Index(order, running)
	if at < slices.Index(order, after) {
		t.Fatalf("the late socket's first executing names %q, not the node running when it connected (%s or later)", running, after)
	}
	var nodes []string
	executed := 0
	for _, m := range first {
		switch m["type"] {
		case "execution_start", "execution_cached":
			t.Errorf("the late socket got %v, which was sent before it connected", m)
		case "executing":
			if n, ok := dataOf(m)["node"].(string); ok {
				nodes = append(nodes, n)
			}
		case "executed":
			executed++
		}
	}
	if want := order[at:]; !slices.Equal(nodes, want) {
		t.Errorf("the late socket got executing for %v, want %v (the rest, from the node running)", nodes, want)
	}
	if executed != 1 {
		t.Errorf("the late socket got %d executed messages, want 1", executed)
	}
	if err := endsAsComfyUI(msgs, id); err != nil {
		t.Error(err)
		for _, m := range msgs {
			t.Logf("  %v", m)
		}
	}
}

// endsAsComfyUI checks that a prompt's end on a socket is ComfyUI's:
// execution_success, then a status, then executing null, and nothing of
// the prompt after it. Keepalive statuses may come anywhere.
func endsAsComfyUI(msgs []map[string]any, id string) error {
	end := slices.IndexFunc(msgs, func(m map[string]any) bool {
		return m["type"] == "execution_success" && promptOf(m) == id
	})
	if end < 0 {
		return fmt.Errorf("no execution_success")
	}
	var rest []string
	for _, m := range msgs[end+1:] {
		typ, _ := m["type"].(string)
		if typ == "executing" {
			typ = fmt.Sprintf("executing %v", dataOf(m)["node"])
		}
		rest = append(rest, typ)
	}
	if len(rest) < 2 || rest[0] != "status" || !slices.Contains(rest, "executing <nil>") {
		return fmt.Errorf("after execution_success: %v, want status, then executing null", rest)
	}
	for i, typ := range rest {
		if typ == "executing <nil>" {
			if slices.ContainsFunc(msgs[end+2+i:], func(m map[string]any) bool { return promptOf(m) == id }) {
				return fmt.Errorf("messages of the prompt after executing null: %v", rest)
			}
			break
		}
		if typ != "status" {
			return fmt.Errorf("after execution_success: %v, want status, then executing null", rest)
		}
	}
	return nil
}
