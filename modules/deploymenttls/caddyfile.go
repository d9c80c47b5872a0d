package deploymenttls

import "github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

// UnmarshalCaddyfile reads, inside on_demand_tls:
//
//	permission comfy_deployment {
//		domains <base domain>...
//	}
func (p *Permission) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // module name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "domains":
			args := d.RemainingArgs()
			if len(args) == 0 {
				return d.ArgErr()
			}
			p.Domains = append(p.Domains, args...)
		default:
			return d.Errf("unknown comfy_deployment permission option %q", d.Val())
		}
	}
	return nil
}
