package sdk

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestOfficialSDKDeployment runs the official SDK against a deployment of
// a gateway started from the serverless example (Postgres and Redis),
// addressed by its /deployment/<id> prefix.
func TestOfficialSDKDeployment(t *testing.T) {
	root := gateway.RepoRoot(t)
	requireSDK(t)
	example, err := os.ReadFile(filepath.Join(root, "caddyfile-examples", "serverless.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The example as an operator runs it, with admin off and a short grace
	// period so that it neither collides with nor holds up anything here.
	cfg := strings.Replace(string(example), "{\n", "{\n\tadmin off\n", 1)
	cfg = strings.Replace(cfg, "grace_period 30s", "grace_period 1s", 1)
	dir := t.TempDir()
	port := gateway.FreePort(t)
	env := []string{
		"COMFYGATE_POSTGRES_DSN=" + pgtest.DSN(t),
		"COMFYGATE_REDIS_URL=" + pgtest.RedisURL(t),
		"COMFYGATE_BLOB_DIR=" + filepath.Join(dir, "blobs"),
		fmt.Sprintf("COMFYGATE_HTTP_PORT=%d", port),
		fmt.Sprintf("COMFYGATE_HTTPS_PORT=%d", gateway.FreePort(t)),
		"COMFYGATE_DEPLOYMENT_DOMAINS=run.example.test stg.run.example.test",
	}
	g := gateway.Start(t, cfg, gateway.Options{Port: port, Dir: dir, Env: env})
	cfgPath := filepath.Join(dir, fmt.Sprintf("Caddyfile.%d", port))
	cli := func(args ...string) string {
		cmd := exec.Command(gateway.Binary(t), args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "create", "acme-sdk", "--account", "acme", "--pool", "shared")
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "state", "acme-sdk", "ready")
	key := cli("api-key", "--config", cfgPath, "--adapter", "caddyfile", "create", "--account", "acme")
	runNodeTests(t, []string{"COMFY_BASE_URL=" + g.URL + "/deployment/acme-sdk", "COMFY_API_KEY=" + key},
		filepath.Join("deployment", "deployment.test.mjs"))
}
