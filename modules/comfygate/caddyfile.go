package comfygate

import (
	"encoding/json"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/dustin/go-humanize"
)

func init() {
	httpcaddyfile.RegisterGlobalOption("comfygate", parseGlobalOption)
}

// parseGlobalOption sets up the comfygate app from the global option:
//
//	comfygate {
//		storage embedded [<dir>]
//		storage postgres <dsn>
//		redis <url>
//		blobs file_system <dir>
//		asset_retention <duration>
//		max_upload_size <size>
//	}
func parseGlobalOption(d *caddyfile.Dispenser, existing any) (any, error) {
	app := new(App)
	if existing != nil {
		if prev, ok := existing.(httpcaddyfile.App); ok {
			if err := json.Unmarshal(prev.Value, app); err != nil {
				return nil, err
			}
		}
	}
	if err := app.UnmarshalCaddyfile(d); err != nil {
		return nil, err
	}
	return httpcaddyfile.App{Name: "comfygate", Value: caddyconfig.JSON(app, nil)}, nil
}

// UnmarshalCaddyfile reads the comfygate global option block.
func (a *App) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // option name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "storage":
			if !d.NextArg() {
				return d.ArgErr()
			}
			sc := &StorageConfig{Backend: d.Val()}
			switch sc.Backend {
			case "embedded":
				if d.NextArg() {
					sc.Dir = d.Val()
				}
			case "postgres":
				if !d.NextArg() {
					return d.Errf("storage postgres needs a DSN")
				}
				sc.DSN = d.Val()
			default:
				return d.Errf("unknown storage backend %q", sc.Backend)
			}
			if d.NextArg() {
				return d.ArgErr()
			}
			a.Storage = sc
		case "redis":
			if !d.AllArgs(&a.Redis) {
				return d.ArgErr()
			}
		case "blobs":
			var backend, dir string
			if !d.AllArgs(&backend, &dir) {
				return d.ArgErr()
			}
			if backend != "file_system" {
				return d.Errf("unknown blobs backend %q", backend)
			}
			a.Blobs = &BlobsConfig{Backend: backend, Dir: dir}
		case "asset_retention":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil {
				return d.Errf("asset_retention: %v", err)
			}
			a.AssetRetention = caddy.Duration(dur)
		case "max_upload_size":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(v)
			if err != nil {
				return d.Errf("max_upload_size: %v", err)
			}
			a.MaxUploadBytes = int64(n)
		default:
			return d.Errf("unknown comfygate option %q", d.Val())
		}
	}
	return nil
}

var _ caddyfile.Unmarshaler = (*App)(nil)
