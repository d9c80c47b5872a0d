package gateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// SelfHostedExample is caddyfile-examples/self-hosted.Caddyfile as a user
// runs it, moved to {PORT} (see Start) and with the admin endpoint off so
// that it cannot collide with anything else on this machine.
func SelfHostedExample(t testing.TB) string {
	t.Helper()
	return Example(t, "self-hosted.Caddyfile")
}

// Example is caddyfile-examples/<name> moved from :8189 to {PORT}, with
// the admin endpoint off (see SelfHostedExample).
func Example(t testing.TB, name string) string {
	t.Helper()
	example, err := os.ReadFile(filepath.Join(RepoRoot(t), "caddyfile-examples", name))
	if err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(string(example), ":8189", ":{PORT}")
	return strings.Replace(cfg, "{\n", "{\n\tadmin off\n", 1)
}

// V2Site is what a test gateway serving /api/v2 needs besides its
// comfygate options.
type V2Site struct {
	// Admin is Caddy's admin address; empty turns the endpoint off.
	Admin string
	// Auth is the comfy_auth directive; empty means "comfy_auth none".
	Auth string
	// Pool is the comfy_jobs pool; empty means the default pool.
	Pool string
	// TLS serves the site as https://127.0.0.1:{PORT} with a certificate
	// of Caddy's internal CA; start it with Options.TLS.
	TLS bool
}

// V2Config is a Caddyfile for a gateway on {PORT} (see Start) whose
// comfygate global option body is global and whose site serves the v2 API
// in the documented handler order.
func V2Config(global string, site V2Site) string {
	auth := site.Auth
	if auth == "" {
		auth = "comfy_auth none"
	}
	jobs := "comfy_jobs"
	if site.Pool != "" {
		jobs += " " + site.Pool
	}
	address, tls, options := "http://:{PORT}", "", ""
	if site.TLS {
		// skip_install_trust: the tests trust the CA themselves; the
		// machine's trust store is left alone.
		address, tls, options = "https://127.0.0.1:{PORT}", "\n\ttls internal", "skip_install_trust"
	}
	return globalOptions(site.Admin, options, global) + `
` + address + ` {
	bind 127.0.0.1` + tls + `
	route {
		error_envelope
		` + auth + `
		idempotency
		comfy_assets
		` + jobs + `
		error "not found" 404
	}
}
`
}

// RouterSite configures RouterConfig's site.
type RouterSite struct {
	// Admin is Caddy's admin address; empty turns the endpoint off.
	Admin string
	// JWTSecret is comfy_auth's HS256 key.
	JWTSecret string
	// Catalog is model_router's catalog file.
	Catalog string
	// Options are further model_router lines, for example "max_in_flight 4".
	Options []string
}

// RouterConfig is a Caddyfile for a gateway on {PORT} (see Start) whose
// comfygate global option body is global and whose site serves the model
// router under /v1/models and /v2/models, behind error_envelope router and
// comfy_auth jwt, with http:// upstreams allowed (the partner peers) and
// input_schema_url under https://router.test.
func RouterConfig(global string, site RouterSite) string {
	return globalOptions(site.Admin, "", global) + `
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/* /v2/models /v2/models/*
	route @router {
		error_envelope router
		comfy_auth jwt {
			key HS256 secret ` + site.JWTSecret + `
		}
		model_router {
			catalog ` + site.Catalog + `
			public_base https://router.test
			allow_insecure_upstreams
			` + strings.Join(site.Options, "\n\t\t\t") + `
		}
	}
}
`
}

// globalOptions is the global options block of a test gateway: admin at
// the given address (off when empty), a short grace period, further
// global options (a line, may be empty), and comfygate with body global.
func globalOptions(admin, options, global string) string {
	if admin == "" {
		admin = "off"
	}
	return `{
	admin ` + admin + `
	grace_period 1s
	` + options + `
	comfygate {
		` + global + `
	}
}
`
}
