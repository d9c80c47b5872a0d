package comfyconsole

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_console", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_console", httpcaddyfile.Before, "respond")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_console {
//		token <token>                 # a static bearer token ({env.X}), or
//		api_key_account <account>     # the API keys of this account
//	}
//
// One of the two is required: the console is never open.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "token":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.Token = d.Val()
		case "api_key_account":
			if !d.NextArg() {
				return d.ArgErr()
			}
			h.APIKeyAccount = d.Val()
		default:
			return d.Errf("unknown comfy_console option %q", d.Val())
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
