package comfydeployment

import (
	"strconv"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("comfy_deployment", parseCaddyfile)
	// After try_files is before basic_auth and so before comfy_auth, which
	// must follow: comfy_auth admits the caller to the resolved deployment.
	httpcaddyfile.RegisterDirectiveOrder("comfy_deployment", httpcaddyfile.After, "try_files")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	comfy_deployment {
//		domains <base domain>...
//		retry_after <duration>
//		demo {
//			max_queued <n>
//			max_upload_size <size>
//			max_streams <n>
//			submits <n> <window>
//		}
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "domains":
			h.Domains = append(h.Domains, d.RemainingArgs()...)
			if len(h.Domains) == 0 {
				return d.ArgErr()
			}
		case "retry_after":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			if err := comfygate.ParseDuration(v, &h.RetryAfter); err != nil {
				return d.Errf("retry_after: %v", err)
			}
		case "demo":
			if err := h.unmarshalDemo(d); err != nil {
				return err
			}
		default:
			return d.Errf("unknown comfy_deployment option %q", d.Val())
		}
	}
	return nil
}

func (h *Handler) unmarshalDemo(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	if h.Demo == nil {
		h.Demo = &DemoConfig{}
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		args := d.RemainingArgs()
		var err error
		switch {
		case name == "submits":
			if len(args) != 2 {
				return d.ArgErr()
			}
			if h.Demo.Submits, err = strconv.Atoi(args[0]); err == nil {
				err = comfygate.ParseDuration(args[1], &h.Demo.SubmitsWindow)
			}
		case len(args) != 1:
			return d.ArgErr()
		case name == "max_queued":
			h.Demo.MaxQueued, err = strconv.Atoi(args[0])
		case name == "max_streams":
			h.Demo.MaxStreams, err = strconv.Atoi(args[0])
		case name == "max_upload_size":
			var n uint64
			n, err = humanize.ParseBytes(args[0])
			h.Demo.MaxUploadBytes = int64(n)
		default:
			return d.Errf("unknown demo option %q", name)
		}
		if err != nil {
			return d.Errf("demo %s: %v", name, err)
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
