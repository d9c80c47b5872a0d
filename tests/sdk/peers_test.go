package sdk

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestOfficialSDKOnComfyUIPeers runs the same SDK tests, unchanged, against
// a gateway whose pool is two test ComfyUI workers instead of the built-in
// executor (two slots, as the self-hosted example has).
func TestOfficialSDKOnComfyUIPeers(t *testing.T) {
	root := gateway.RepoRoot(t)
	sdkDir := filepath.Join(root, "tests", "sdk")
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@comfyorg", "sdk")); err != nil {
		t.Fatalf("the SDK is not installed; run tests/run (it runs npm ci in tests/sdk): %v", err)
	}
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

	tests, err := filepath.Glob(filepath.Join(sdkDir, "*.test.mjs"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no SDK tests found: %v", err)
	}
	args := append([]string{"--test", "--test-reporter=spec"}, tests...)
	cmd := exec.Command("node", args...)
	cmd.Dir = sdkDir
	cmd.Env = append(os.Environ(), "COMFY_BASE_URL="+g.URL, "COMFYGATE_TEST_PORT="+strconv.Itoa(g.Port))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("SDK tests failed: %v", err)
	}
	if n := p1.Stats().Prompts + p2.Stats().Prompts; n == 0 {
		t.Fatal("no prompt reached the ComfyUI peers")
	}
}
