package sdk

import (
	"fmt"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestOfficialSDKOnComfyUIPeers runs the same SDK tests, unchanged, against
// a gateway whose pool is two test ComfyUI workers instead of the built-in
// executor (two slots, as the self-hosted example has).
func TestOfficialSDKOnComfyUIPeers(t *testing.T) {
	requireSDK(t)
	p1 := comfyuipeer.New(t, comfyuipeer.Options{})
	p2 := comfyuipeer.New(t, comfyuipeer.Options{})
	cfg := fmt.Sprintf(`{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
		pool gpu comfyui {
			worker %s
			worker %s
		}
	}
}

http://:{PORT} {
	bind 127.0.0.1
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs gpu
		error "not found" 404
	}
}
`, p1.URL, p2.URL)
	g := gateway.Start(t, cfg, gateway.Options{})

	runSDKTests(t, g)
	if n := p1.Stats().Prompts + p2.Stats().Prompts; n == 0 {
		t.Fatal("no prompt reached the ComfyUI peers")
	}
}
