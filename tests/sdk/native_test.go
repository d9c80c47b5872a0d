package sdk

import (
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// NativeConfig is a gateway on {PORT} serving both fronts: the v2 API and
// ComfyUI's API at the site root, and ComfyUI's API alone under /comfy/,
// behind API keys (also accepted as ?token=), with jobs on pool (the
// default pool when empty).
func NativeConfig(global, pool string) string {
	auth := "comfy_auth api_keys {\n\t\t\t\tquery_param token\n\t\t\t}"
	jobs, native := "comfy_jobs", "comfy_native"
	if pool != "" {
		jobs, native = jobs+" "+pool, native+" "+pool
	}
	return `{
	admin off
	grace_period 1s
	comfygate {
		` + global + `
	}
}
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

// CreateKey mints an API key for account with the CLI against g's config.
func CreateKey(t *testing.T, g *gateway.Gateway, account string) string {
	t.Helper()
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	if len(cfgs) != 1 {
		t.Fatalf("want one Caddyfile in %s, have %v", g.Dir, cfgs)
	}
	cmd := exec.Command(gateway.Binary(t), "api-key", "create", "--config", cfgs[0], "--adapter", "caddyfile", "--account", account)
	cmd.Dir = g.Dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("api-key create: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out))
}

// TestComfyUIClients runs @saintno/comfyui-sdk (under the /comfy/ prefix)
// and @stable-canvas/comfyui-client (at the site root), unmodified,
// against the ComfyUI front on the built-in pool and on a pool of a test
// ComfyUI peer.
func TestComfyUIClients(t *testing.T) {
	requireSDK(t)
	pools := []struct {
		name   string
		global func(t *testing.T) string
		pool   string
		check  func(t *testing.T)
	}{
		{name: "builtin", global: func(*testing.T) string { return "storage embedded ./data" }},
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
			g := gateway.Start(t, NativeConfig(global, p.pool), gateway.Options{})
			key := CreateKey(t, g, "native-a")
			runNodeTests(t, []string{"NATIVE_URL=" + g.URL + "/comfy", "NATIVE_KEY=" + key}, "native/saintno.test.mjs")
			runNodeTests(t, []string{"NATIVE_URL=" + g.URL, "NATIVE_KEY=" + key}, "native/stable-canvas.test.mjs")
			if peer != nil && peer.Stats().Prompts == 0 {
				t.Fatal("no prompt reached the ComfyUI peer")
			}
		})
	}
}
