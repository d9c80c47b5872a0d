package comfyjobs

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_jobs", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_jobs", httpcaddyfile.Before, "respond")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_jobs [<pool>]
//
// The pool defaults to the comfygate app's default pool. Queue, retention,
// lease and stream bounds are options of the comfygate
// global option's jobs block.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.Pool = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Err("comfy_jobs takes no block")
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
