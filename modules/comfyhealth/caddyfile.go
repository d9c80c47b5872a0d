package comfyhealth

import (
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_health", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("comfy_health", httpcaddyfile.Before, "respond")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_health {
//		live_path  <path>      # default /healthz
//		ready_path <path>      # default /readyz
//		timeout    <duration>  # default 2s
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		if !d.NextArg() {
			return d.ArgErr()
		}
		switch opt {
		case "live_path":
			h.LivePath = d.Val()
		case "ready_path":
			h.ReadyPath = d.Val()
		case "timeout":
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 || dur > time.Minute {
				return d.Errf("timeout must be a duration up to 1m: %q", d.Val())
			}
			h.Timeout = caddy.Duration(dur)
		default:
			return d.Errf("unknown comfy_health option %q", opt)
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
