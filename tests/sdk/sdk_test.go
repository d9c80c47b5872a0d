// Package sdk runs the official Comfy SDK (@comfyorg/sdk, Node) against a
// real gateway started from the self-hosted example Caddyfile.
package sdk

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

func TestOfficialSDK(t *testing.T) {
	root := gateway.RepoRoot(t)
	sdkDir := filepath.Join(root, "tests", "sdk")
	if _, err := os.Stat(filepath.Join(sdkDir, "node_modules", "@comfyorg", "sdk")); err != nil {
		t.Fatalf("the SDK is not installed; run tests/run (it runs npm ci in tests/sdk): %v", err)
	}
	example, err := os.ReadFile(filepath.Join(root, "caddyfile-examples", "self-hosted.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The example as a user runs it, on a free port and with admin off so
	// that it cannot collide with anything else on this machine.
	cfg := strings.ReplaceAll(string(example), ":8189", ":{PORT}")
	cfg = strings.Replace(cfg, "{\n", "{\n\tadmin off\n", 1)
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
}
