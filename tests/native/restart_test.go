package native

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestRestartKeepsPrompt: the gateway is killed (kill -9) while a prompt
// queued through the ComfyUI front runs on a ComfyUI peer. After a restart
// on the same storage the prompt is retried and finishes: the client's
// /history/{prompt_id} shows it with its output, and a socket reconnecting
// with the prompt's client id receives its end — what ComfyUI itself,
// whose queue and history live in memory, cannot do.
func TestRestartKeepsPrompt(t *testing.T) {
	t.Parallel()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	peer.Set(func(s *comfyuipeer.Switches) { s.Slow = 400 * time.Millisecond })
	global := fmt.Sprintf(`storage embedded ./data
		jobs {
			lease 2s
			max_attempts 3
		}
		pool gpu comfyui {
			worker %s
			unhealthy_after 3s
			reconnect_max 1s
		}`, peer.URL)
	cfg := gateway.NativeConfig(global, "gpu")
	dir, port := t.TempDir(), gateway.FreePort(t)
	first := gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: port})
	c := newClient(t, first, "restart-a")
	c.upload("in.png", gateway.GradientPNG(t, size))
	const clientID = "restart-client"
	s := c.dial(clientID)
	id := c.queue(invert("in.png"), clientID)
	s.until(t, "execution_start", id, 30*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for peer.Running() == "" && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if peer.Running() == "" {
		t.Fatal("the prompt never ran on the peer")
	}
	if h := c.history("/history/" + id); len(h) != 0 {
		t.Fatalf("the prompt finished before the kill (%v); slow the peer down", h)
	}
	first.Kill()

	second := gateway.Start(t, cfg, gateway.Options{Dir: dir, Port: port})
	if second.URL != c.base {
		t.Fatalf("restarted on %s, the client knows %s", second.URL, c.base)
	}
	s = c.dial(clientID) // the prompt is unfinished: the new socket follows it
	s.until(t, "execution_success", id, 90*time.Second)
	entry := c.waitHistory(id, 30*time.Second)
	if entry.Status.StatusStr != "success" {
		t.Fatalf("history after the restart: %+v", entry.Status)
	}
	r := c.view(only(t, entry))
	if r.Status != http.StatusOK {
		t.Fatalf("/view after the restart: %d %s", r.Status, r.Body)
	}
	checkInverted(t, r.Body, size)
}
