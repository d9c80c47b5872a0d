package gateway

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// NativeConfig is a Caddyfile for a gateway on {PORT} (see Start) serving
// both fronts behind API keys (also accepted as ?token=): the v2 API and
// ComfyUI's API at the site root, and ComfyUI's API alone under /comfy/.
// global is the comfygate global option's body; jobs run on pool (the
// default pool when empty).
func NativeConfig(global, pool string) string {
	auth := "comfy_auth api_keys {\n\t\t\t\tquery_param token\n\t\t\t}"
	jobs, native := "comfy_jobs", "comfy_native"
	if pool != "" {
		jobs, native = jobs+" "+pool, native+" "+pool
	}
	return globalOptions("", "", global) + `
http://:{PORT} {
	bind 127.0.0.1
	handle_path /comfy/* {
		route {
			error_envelope
			` + auth + `
			` + native + `
			error "not found" 404
		}
	}
	handle {
		route {
			error_envelope
			` + auth + `
			idempotency
			comfy_assets
			` + jobs + `
			` + native + `
			error "not found" 404
		}
	}
}
`
}

// CreateAPIKey mints an API key for account with the binary's api-key
// command against g's configuration.
func CreateAPIKey(t testing.TB, g *Gateway, account string) string {
	t.Helper()
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	if len(cfgs) == 0 {
		t.Fatalf("no Caddyfile in %s", g.Dir)
	}
	cmd := exec.Command(Binary(t), "api-key", "create", "--config", cfgs[len(cfgs)-1], "--adapter", "caddyfile", "--account", account)
	cmd.Dir = g.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("api-key create: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}
