// Package sdk runs the official Comfy SDK (@comfyorg/sdk, Node) against
// real gateways: its jobs and assets client against one started from the
// self-hosted example Caddyfile (every *.test.mjs here), and its
// comfy.models.run against model_router (router/models.test.mjs).
package sdk

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

func TestOfficialSDK(t *testing.T) {
	requireSDK(t)
	runSDKTests(t, gateway.Start(t, gateway.SelfHostedExample(t), gateway.Options{}))
}

// TestOfficialSDKOverTLS runs the same SDK tests against the self-hosted
// example served over HTTPS (Caddy's internal CA, which Node is told to
// trust), the shape of a hosted front door.
func TestOfficialSDKOverTLS(t *testing.T) {
	root := gateway.RepoRoot(t)
	requireSDK(t)
	example, err := os.ReadFile(filepath.Join(root, "caddyfile-examples", "self-hosted.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.Replace(string(example), "{\n", "{\n\tadmin off\n\tskip_install_trust\n", 1)
	site := "http://:8189 {\n\tbind 127.0.0.1\n"
	if !strings.Contains(cfg, site) {
		t.Fatalf("the self-hosted example no longer starts its site with %q", site)
	}
	cfg = strings.Replace(cfg, site, "https://127.0.0.1:{PORT} {\n\tbind 127.0.0.1\n\ttls internal\n", 1)
	g := gateway.Start(t, cfg, gateway.Options{TLS: true})
	runSDKTests(t, g, "NODE_EXTRA_CA_CERTS="+g.CACertFile())
}

// sdkDir is where the SDK's Node tests and their node_modules live.
func sdkDir(t *testing.T) string { return filepath.Join(gateway.RepoRoot(t), "tests", "sdk") }

// requireSDK fails the test when the SDK's npm dependencies are missing.
func requireSDK(t *testing.T) {
	t.Helper()
	for _, pkg := range []string{"@comfyorg/sdk", "@saintno/comfyui-sdk", "@stable-canvas/comfyui-client", "ws"} {
		if _, err := os.Stat(filepath.Join(sdkDir(t), "node_modules", pkg)); err != nil {
			t.Fatalf("%s is not installed; run tests/run (it runs npm ci in tests/sdk): %v", pkg, err)
		}
	}
}

// runSDKTests runs every *.test.mjs against the gateway g, with env added
// to Node's environment.
func runSDKTests(t *testing.T, g *gateway.Gateway, env ...string) {
	t.Helper()
	dir := sdkDir(t)
	tests, err := filepath.Glob(filepath.Join(dir, "*.test.mjs"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no SDK tests found: %v", err)
	}
	env = append(env, "COMFY_BASE_URL="+g.URL, "COMFYGATE_TEST_PORT="+strconv.Itoa(g.Port))
	runNodeTests(t, env, tests...)
}

// runNodeTests runs node's test runner on files (relative to sdkDir or
// absolute) with env added to the environment, and fails t when any fails.
func runNodeTests(t *testing.T, env []string, files ...string) {
	t.Helper()
	if err := nodeTests(t, env, files...); err != nil {
		t.Fatal(err)
	}
}

// nodeTests is runNodeTests for a goroutine other than the test's: it
// logs node's output and returns its failure.
func nodeTests(t *testing.T, env []string, files ...string) error {
	cmd := exec.Command("node", append([]string{"--test", "--test-reporter=spec"}, files...)...)
	cmd.Dir = sdkDir(t)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		return fmt.Errorf("SDK tests failed: %w", err)
	}
	return nil
}
