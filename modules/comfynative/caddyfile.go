package comfynative

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_native", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_native", httpcaddyfile.Before, "respond")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_native [<pool>]
//
// The pool defaults to the comfygate app's default pool. Queue, retention
// and socket bounds are the comfygate global option's jobs block (a socket
// counts against max_streams, with the account's event streams).
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.Pool = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	if d.NextBlock(0) {
		return d.Err("comfy_native takes no block")
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
