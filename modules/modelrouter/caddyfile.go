package modelrouter

import (
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/comfygate/comfygate/internal/router/rehost"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("model_router", parseCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("model_router", httpcaddyfile.Before, "respond")
}

// UnmarshalCaddyfile sets up the handler from Caddyfile tokens:
//
//	model_router [<catalog_file>] {
//		catalog <file>
//		public_base https://router.example.com
//		cursor_key {env.ROUTER_CURSOR_KEY}
//		max_in_flight <n>
//		spend_ceiling_cents <n>
//		rate <name> <period> <max>      # repeatable
//		require_credits
//		lease_ttl <duration>
//		redis_prefix <prefix>
//		collect_window <duration>
//		takeover_after <duration>
//		max_body_size <size>
//		rehost <provider> {             # repeatable, one per provider
//			urls <path>...              # members holding result URLs
//			base64 <path>...            # members holding base64 payloads
//			lifetime <duration>         # retention of the copies (default 24h)
//		}
//		rehost_max_size <size>          # one result (default 64MiB)
//		rehost_timeout <duration>       # one result's copy (default 1m)
//		rehost_base <url>               # asset API base of the content URLs
//		rehost_allow_private            # fetch loopback/private addresses (tests)
//		allow_insecure_upstreams        # tests only
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // directive name
	if d.NextArg() {
		h.Catalog = d.Val()
	}
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		opt := d.Val()
		switch opt {
		case "allow_insecure_upstreams", "require_credits", "rehost_allow_private":
			if d.NextArg() {
				return d.ArgErr()
			}
			switch opt {
			case "require_credits":
				h.RequireCredits = true
			case "rehost_allow_private":
				h.RehostAllowPrivate = true
			default:
				h.AllowInsecureUpstreams = true
			}
		case "rehost":
			if err := h.unmarshalRehost(d); err != nil {
				return err
			}
		case "rate":
			var args [3]string
			for i := range args {
				if !d.NextArg() {
					return d.Err("rate needs <name> <period> <max>")
				}
				args[i] = d.Val()
			}
			period, err := caddy.ParseDuration(args[1])
			if err != nil {
				return d.Errf("rate period: %v", err)
			}
			n, err := strconv.Atoi(args[2])
			if err != nil {
				return d.Errf("rate max: %v", err)
			}
			h.Rate = append(h.Rate, RateWindow{Name: args[0], Period: caddy.Duration(period), Max: n})
		default:
			if !d.NextArg() {
				return d.ArgErr()
			}
			if err := h.setOption(d, opt, d.Val()); err != nil {
				return err
			}
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	return nil
}

func (h *Handler) setOption(d *caddyfile.Dispenser, opt, v string) error {
	var err error
	switch opt {
	case "catalog":
		h.Catalog = v
	case "public_base":
		h.PublicBase = v
	case "cursor_key":
		h.CursorKey = v
	case "redis_prefix":
		h.RedisPrefix = v
	case "max_in_flight":
		h.MaxInFlight, err = strconv.Atoi(v)
	case "spend_ceiling_cents":
		h.SpendCeilingCents, err = strconv.ParseInt(v, 10, 64)
	case "lease_ttl":
		err = comfygate.ParseDuration(v, &h.LeaseTTL)
	case "collect_window":
		err = comfygate.ParseDuration(v, &h.CollectWindow)
	case "takeover_after":
		err = comfygate.ParseDuration(v, &h.TakeoverAfter)
	case "rehost_base":
		h.RehostBase = v
	case "rehost_timeout":
		err = comfygate.ParseDuration(v, &h.RehostTimeout)
	case "rehost_max_size":
		var n uint64
		n, err = humanize.ParseBytes(v)
		h.RehostMaxBytes = int64(n)
	case "max_body_size":
		var n uint64
		n, err = humanize.ParseBytes(v)
		h.MaxBodyBytes = int64(n)
	default:
		return d.Errf("unknown model_router option %q", opt)
	}
	if err != nil {
		return d.Errf("%s: %v", opt, err)
	}
	return nil
}

// unmarshalRehost reads one `rehost <provider> { … }` block.
func (h *Handler) unmarshalRehost(d *caddyfile.Dispenser) error {
	var provider string
	if !d.Args(&provider) {
		return d.Err("rehost needs a provider (the first segment of model ids)")
	}
	if _, dup := h.Rehost[provider]; dup {
		return d.Errf("rehost %s is configured twice", provider)
	}
	var spec rehost.RuleSpec
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch sub := d.Val(); sub {
		case "urls", "base64":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			if sub == "urls" {
				spec.URLs = append(spec.URLs, args...)
			} else {
				spec.Base64 = append(spec.Base64, args...)
			}
		case "lifetime":
			if !d.AllArgs(&spec.Lifetime) {
				return d.ArgErr()
			}
		default:
			return d.Errf("unknown rehost option %q", sub)
		}
	}
	if _, err := spec.Compile(); err != nil {
		return d.Errf("rehost %s: %v", provider, err)
	}
	if h.Rehost == nil {
		h.Rehost = map[string]rehost.RuleSpec{}
	}
	h.Rehost[provider] = spec
	return nil
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	m := new(Handler)
	err := m.UnmarshalCaddyfile(h.Dispenser)
	return m, err
}

var _ caddyfile.Unmarshaler = (*Handler)(nil)
