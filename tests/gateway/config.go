package gateway

// V2Site is what a test gateway serving /api/v2 needs besides its
// comfygate options.
type V2Site struct {
	// Admin is Caddy's admin address; empty turns the endpoint off.
	Admin string
	// Auth is the comfy_auth directive; empty means "comfy_auth none".
	Auth string
	// Pool is the comfy_jobs pool; empty means the default pool.
	Pool string
}

// V2Config is a Caddyfile for a gateway on {PORT} (see Start) whose
// comfygate global option body is global and whose site serves the v2 API
// in the documented handler order.
func V2Config(global string, site V2Site) string {
	admin := "admin off"
	if site.Admin != "" {
		admin = "admin " + site.Admin
	}
	auth := site.Auth
	if auth == "" {
		auth = "comfy_auth none"
	}
	jobs := "comfy_jobs"
	if site.Pool != "" {
		jobs += " " + site.Pool
	}
	return `{
	` + admin + `
	grace_period 1s
	comfygate {
		` + global + `
	}
}

http://:{PORT} {
	bind 127.0.0.1
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
