package native

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestTenancy: account B sees none of account A's prompts or files on
// /history, /queue, /view and /ws, and cannot act on them, even when both
// use the same client id and file names.
func TestTenancy(t *testing.T) {
	t.Parallel()
	g := startBuiltin(t)
	a, b := newClient(t, g, "tenant-a"), newClient(t, g, "tenant-b")
	const shared = "same-client-id"
	a.upload("secret.png", gateway.GradientPNG(t, size))
	done := a.queue(invert("secret.png"), shared)
	entry := a.waitHistory(done, 10*time.Second)
	output := only(t, entry)

	t.Run("history", func(t *testing.T) {
		b.t = t
		if h := b.history("/history"); len(h) != 0 {
			t.Fatalf("B's /history = %v", keys(h))
		}
		if h := b.history("/history/" + done); len(h) != 0 {
			t.Fatalf("B's /history/{A's prompt} = %v", h)
		}
		b.json(http.MethodPost, "/history", map[string]any{"delete": []string{done}}, nil)
		b.json(http.MethodPost, "/history", map[string]any{"clear": true}, nil)
		a.t = t
		if _, ok := a.history("/history")[done]; !ok {
			t.Fatal("B's delete and clear hid A's prompt")
		}
	})

	t.Run("view", func(t *testing.T) {
		a.t, b.t = t, t
		input := map[string]string{"filename": "secret.png", "subfolder": "", "type": "input"}
		for _, ref := range []map[string]string{output, input} {
			if r := a.view(ref); r.Status != http.StatusOK {
				t.Fatalf("A's own /view %v: %d", ref, r.Status)
			}
			if r := b.view(ref); r.Status != http.StatusNotFound {
				t.Fatalf("B's /view of A's %v: %d %s", ref, r.Status, r.Body)
			}
		}
		// Nor can B's prompt load A's upload by name.
		r := b.do(http.MethodPost, "/prompt", map[string]any{"prompt": invert("secret.png")})
		if r.Status != http.StatusBadRequest {
			t.Fatalf("B's prompt over A's file: %d %s", r.Status, r.Body)
		}
	})

	t.Run("queue and ws", func(t *testing.T) {
		a.t, b.t = t, t
		sa, sb := a.dial(shared), b.dial(shared)
		running := a.queue(slow(), shared)
		sa.until(t, "execution_start", running, 20*time.Second)
		if r, _ := a.queueIDs(); !slices.Contains(r, running) {
			t.Fatalf("A's /queue running = %v, want %s", r, running)
		}
		rb, pb := b.queueIDs()
		if len(rb)+len(pb) != 0 {
			t.Fatalf("B's /queue = %v %v", rb, pb)
		}
		// B's interrupt and queue delete leave A's prompt running.
		b.json(http.MethodPost, "/interrupt", nil, nil)
		b.json(http.MethodPost, "/interrupt", map[string]any{"prompt_id": running}, nil)
		b.json(http.MethodPost, "/queue", map[string]any{"delete": []string{running}, "clear": true}, nil)
		if r, _ := a.queueIDs(); !slices.Contains(r, running) {
			t.Fatal("B's interrupt or queue delete stopped A's prompt")
		}
		// B's sockets of the same client id — one open before A's prompt,
		// one opened while it runs (which would pick up the session's
		// unfinished prompts) — see it at no point; A's sees it to its end.
		late := b.dial(shared)
		a.json(http.MethodPost, "/interrupt", map[string]any{"prompt_id": running}, nil)
		sa.until(t, "execution_interrupted", running, 20*time.Second)
		for _, s := range []*socket{sb, late} {
			msgs := s.drain(time.Second)
			for _, m := range msgs {
				if id := promptOf(m); id == running || id == done {
					t.Fatalf("B's socket received A's prompt: %v", m)
				}
			}
		}
	})
}
