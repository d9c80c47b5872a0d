package comfyauth

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_auth", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_auth", httpcaddyfile.Before, "basic_auth")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_auth none [<account>]
//	comfy_auth static_token <token> [<account>] [{ query_param <name> }]
//	comfy_auth api_keys [{ query_param <name> }]
//	comfy_auth jwt { … }   (see unmarshalJWT)
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.Mode = d.Val()
	switch h.Mode {
	case ModeNone:
		if d.NextArg() {
			h.Account = d.Val()
		}
	case ModeStaticToken:
		if !d.NextArg() {
			return d.Err("static_token needs a token")
		}
		h.Token = d.Val()
		if d.NextArg() {
			h.Account = d.Val()
		}
	case ModeAPIKeys:
	case ModeJWT:
		if d.NextArg() {
			return d.ArgErr()
		}
		return h.unmarshalJWT(d)
	default:
		return d.Errf("unknown comfy_auth mode %q", h.Mode)
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		if h.Mode == ModeNone || d.Val() != "query_param" {
			return d.Errf("comfy_auth %s: unknown option %q", h.Mode, d.Val())
		}
		if !d.NextArg() {
			return d.ArgErr()
		}
		h.QueryParam = d.Val()
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
