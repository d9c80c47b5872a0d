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
	cfg := gateway.V2Config(fmt.Sprintf("storage embedded ./data\n\t\tpool gpu comfyui {\n\t\t\tworker %s\n\t\t\tworker %s\n\t\t}",
		p1.URL, p2.URL), gateway.V2Site{Pool: "gpu"})
	g := gateway.Start(t, cfg, gateway.Options{})

	runSDKTests(t, g)
	if n := p1.Stats().Prompts + p2.Stats().Prompts; n == 0 {
		t.Fatal("no prompt reached the ComfyUI peers")
	}
}
