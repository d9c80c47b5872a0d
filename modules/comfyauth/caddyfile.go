package comfyauth

import (
	"math"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_auth", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_auth", httpcaddyfile.Before, "basic_auth")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_auth none [<account>] [{
//		allow_origin <origin...>
//		allow_host <name...>
//		min_body_rate <size>|off [<grace>]
//	}]
//	comfy_auth static_token <token> [<account>] [{
//		query_param <name>
//		allow_origin <origin...>
//	}]
//	comfy_auth api_keys [{ query_param <name>; allow_origin <origin...> }]
//	comfy_auth jwt { … }   (see unmarshalJWT; allow_origin too)
//
// allow_origin and allow_host may repeat. min_body_rate (every mode) is
// the slowest a request body may arrive, per second (1KiB), and the
// grace (30s) it may fall behind or stall for.
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
		opt := d.Val()
		if ok, err := h.unmarshalSiteOption(d, opt); ok || err != nil {
			if err != nil {
				return err
			}
			continue
		}
		if h.Mode == ModeNone || opt != "query_param" {
			return d.Errf("comfy_auth %s: unknown option %q", h.Mode, opt)
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

// unmarshalSiteOption parses the options every mode takes, allow_origin
// and min_body_rate, and allow_host (mode none) into h; ok is false for
// any other option.
func (h *Handler) unmarshalSiteOption(d *caddyfile.Dispenser, opt string) (ok bool, err error) {
	var into *[]string
	switch {
	case opt == "min_body_rate":
		return true, h.unmarshalBodyRate(d)
	case opt == "allow_origin":
		into = &h.AllowOrigins
	case opt == "allow_host" && h.Mode == ModeNone:
		into = &h.AllowHosts
	default:
		return false, nil
	}
	args := d.RemainingArgs()
	if len(args) == 0 {
		return true, d.ArgErr()
	}
	*into = append(*into, args...)
	return true, nil
}

// unmarshalBodyRate parses min_body_rate <size>|off [<grace>].
func (h *Handler) unmarshalBodyRate(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 2 {
		return d.ArgErr()
	}
	if args[0] == "off" {
		if len(args) > 1 {
			return d.Err("min_body_rate off takes no grace")
		}
		h.MinBodyRate = -1
		return nil
	}
	n, err := humanize.ParseBytes(args[0])
	if err != nil || n == 0 || n > math.MaxInt64 {
		return d.Errf("min_body_rate: %q is not a size in bytes per second (or off)", args[0])
	}
	h.MinBodyRate = int64(n)
	if len(args) == 2 {
		g, err := caddy.ParseDuration(args[1])
		if err != nil || g <= 0 {
			return d.Errf("min_body_rate: grace %q is not a positive duration", args[1])
		}
		h.BodyGrace = caddy.Duration(g)
	}
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
