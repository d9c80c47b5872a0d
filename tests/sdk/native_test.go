package sdk

import (
	"fmt"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestComfyUIClients runs @saintno/comfyui-sdk (under the /comfy/ prefix)
// and @stable-canvas/comfyui-client (at the site root), unmodified,
// against the ComfyUI front on the built-in pool and on a pool of a test
// ComfyUI peer.
func TestComfyUIClients(t *testing.T) {
	requireSDK(t)
	pools := []struct {
		name string
		pool string // empty: the built-in pool
	}{
		{name: "builtin"},
		{name: "comfyui-peer", pool: "gpu"},
	}
	for _, p := range pools {
		t.Run(p.name, func(t *testing.T) {
			global := "storage embedded ./data"
			var peer *comfyuipeer.Peer
			if p.pool != "" {
				peer = comfyuipeer.New(t, comfyuipeer.Options{})
				global += fmt.Sprintf("\n\t\tpool %s comfyui {\n\t\t\tworker %s\n\t\t}", p.pool, peer.URL)
			}
			g := gateway.Start(t, gateway.NativeConfig(global, p.pool), gateway.Options{})
			key := gateway.CreateAPIKey(t, g, "native-a")
			runNodeTests(t, []string{"NATIVE_URL=" + g.URL + "/comfy", "NATIVE_KEY=" + key}, "native/saintno.test.mjs")
			runNodeTests(t, []string{"NATIVE_URL=" + g.URL, "NATIVE_KEY=" + key}, "native/stable-canvas.test.mjs")
			if peer != nil && peer.Stats().Prompts == 0 {
				t.Fatal("no prompt reached the ComfyUI peer")
			}
		})
	}
}
