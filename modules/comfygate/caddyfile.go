package comfygate

import (
	"encoding/json"
	"strconv"

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
//		blobs s3 { … }   (see unmarshalBlobs)
//		asset_retention <duration>
//		max_upload_size <size>
//		builtin_memory <size>
//		jobs {
//			concurrency <n>
//			max_queued <n>
//			retention <duration>
//			running_bound <duration>
//			lease <duration>
//			max_attempts <n>
//			max_streams <n>
//			default_pool <name>
//			purge_after <duration>
//			no_execute
//			account_max_queued <n>
//			account_max_running <n>
//		}
//		pool <name> builtin|comfyui { … }   (see unmarshalPool)
//		reaper {
//			batch_size <n>
//			pause <duration>
//		}
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
			b, err := unmarshalBlobs(d)
			if err != nil {
				return err
			}
			a.Blobs = b
		case "asset_retention":
			var v string
			if !d.AllArgs(&v) {
				return d.ArgErr()
			}
			if err := ParseDuration(v, &a.AssetRetention); err != nil {
				return d.Errf("asset_retention: %v", err)
			}
		case "max_upload_size", "builtin_memory":
			name := d.Val()
			n, err := parseSize(d)
			if err != nil {
				return err
			}
			*map[string]*int64{"max_upload_size": &a.MaxUploadBytes, "builtin_memory": &a.BuiltinMemory}[name] = n
		case "pool":
			p, err := unmarshalPool(d)
			if err != nil {
				return err
			}
			a.Pools = append(a.Pools, p)
		case "jobs":
			if a.JobsConfig == nil {
				a.JobsConfig = &JobsConfig{}
			}
			if err := a.JobsConfig.unmarshalCaddyfile(d); err != nil {
				return err
			}
		case "tracing":
			if d.NextArg() {
				return d.ArgErr()
			}
			a.Tracing = true
		case "reaper":
			if a.Reaper == nil {
				a.Reaper = &ReaperConfig{}
			}
			if err := a.Reaper.unmarshalCaddyfile(d); err != nil {
				return err
			}
		default:
			return d.Errf("unknown comfygate option %q", d.Val())
		}
	}
	return nil
}

// unmarshalCaddyfile reads the jobs block.
func (c *JobsConfig) unmarshalCaddyfile(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		if name == "no_execute" {
			if d.NextArg() {
				return d.ArgErr()
			}
			c.NoExecute = true
			continue
		}
		var v string
		if !d.AllArgs(&v) {
			return d.ArgErr()
		}
		var err error
		switch name {
		case "default_pool":
			c.DefaultPool = v
		case "concurrency":
			c.Concurrency, err = strconv.Atoi(v)
		case "max_queued":
			c.MaxQueued, err = strconv.Atoi(v)
		case "max_attempts":
			c.MaxAttempts, err = strconv.Atoi(v)
		case "account_max_queued":
			c.AccountMaxQueued, err = strconv.Atoi(v)
		case "account_max_running":
			c.AccountMaxRunning, err = strconv.Atoi(v)
		case "max_streams":
			c.MaxStreams, err = strconv.Atoi(v)
		case "retention":
			err = ParseDuration(v, &c.Retention)
		case "running_bound":
			err = ParseDuration(v, &c.RunningBound)
		case "lease":
			err = ParseDuration(v, &c.Lease)
		case "purge_after":
			err = ParseDuration(v, &c.PurgeAfter)
		default:
			return d.Errf("unknown jobs option %q", name)
		}
		if err != nil {
			return d.Errf("jobs %s: %v", name, err)
		}
	}
	return nil
}

// parseSize reads a directive's one size argument (100MiB, 1GB, …).
func parseSize(d *caddyfile.Dispenser) (int64, error) {
	name := d.Val()
	var v string
	if !d.AllArgs(&v) {
		return 0, d.ArgErr()
	}
	n, err := humanize.ParseBytes(v)
	if err != nil {
		return 0, d.Errf("%s: %v", name, err)
	}
	if n > 1<<62 {
		return 0, d.Errf("%s: %s is too large", name, v)
	}
	return int64(n), nil
}

// ParseDuration parses a Caddyfile duration into into (untouched on error).
func ParseDuration(v string, into *caddy.Duration) error {
	dur, err := caddy.ParseDuration(v)
	if err != nil {
		return err
	}
	*into = caddy.Duration(dur)
	return nil
}

var _ caddyfile.Unmarshaler = (*App)(nil)

// unmarshalPool reads a pool block:
//
//	pool <name> builtin {
//		concurrency <n>
//		job_memory <size>
//		(and the options every pool takes, below)
//	}
//	pool <name> comfyui {
//		worker <url> {
//			header <name> <value>
//			concurrency <n>
//			input_dir <path>
//		}
//		workers dns <name> [<port>] {
//			refresh <duration>
//			resolver <host:port>
//			scheme http|https
//			header <name> <value>
//			concurrency <n>
//		}
//		refresh <duration>
//		unhealthy_after <duration>
//		reconnect_max <duration>
//		request_timeout <duration>
//		dispatch affinity|least_busy
//		affinity_wait <duration>
//		affinity_models <n>
//		(and the options every pool takes, below)
//	}
//
// Every pool takes:
//
//	price {
//		per_job <credits>
//		per_second <credits>
//	}
//	max_charge <credits>
//	account_max_queued <n>
//	account_max_running <n>
//
// A comfyui pool also takes a scale block (see unmarshalScale), and may
// have no worker at all (a pool at zero that an autoscaler fills).
func unmarshalPool(d *caddyfile.Dispenser) (*PoolConfig, error) {
	p := new(PoolConfig)
	if !d.AllArgs(&p.Name, &p.Kind) {
		return nil, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "dispatch":
			if !d.AllArgs(&p.Dispatch) {
				return nil, d.ArgErr()
			}
		case "concurrency", "account_max_queued", "account_max_running", "affinity_models":
			name := d.Val()
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, d.Errf("%s: %v", name, err)
			}
			*map[string]*int{"concurrency": &p.Concurrency, "account_max_queued": &p.AccountMaxQueued,
				"account_max_running": &p.AccountMaxRunning, "affinity_models": &p.AffinityModels}[name] = n
		case "job_memory":
			n, err := parseSize(d)
			if err != nil {
				return nil, err
			}
			p.JobMemory = n
		case "max_charge":
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, d.Errf("max_charge: want whole credits: %v", err)
			}
			p.MaxCharge = n
		case "price":
			price, err := unmarshalPrice(d)
			if err != nil {
				return nil, err
			}
			p.Price = price
		case "scale":
			sc, err := unmarshalScale(d)
			if err != nil {
				return nil, err
			}
			p.Scale = sc
		case "refresh", "unhealthy_after", "reconnect_max", "request_timeout", "affinity_wait":
			name := d.Val()
			var v string
			if !d.AllArgs(&v) {
				return nil, d.ArgErr()
			}
			into := map[string]*caddy.Duration{"refresh": &p.Refresh, "unhealthy_after": &p.UnhealthyAfter,
				"reconnect_max": &p.ReconnectMax, "request_timeout": &p.RequestTimeout, "affinity_wait": &p.AffinityWait}[name]
			if err := ParseDuration(v, into); err != nil {
				return nil, d.Errf("%s: %v", name, err)
			}
		case "workers":
			dns, err := unmarshalDNS(d)
			if err != nil {
				return nil, err
			}
			p.DNS = append(p.DNS, dns)
		case "worker":
			w, err := unmarshalWorker(d)
			if err != nil {
				return nil, err
			}
			p.Workers = append(p.Workers, w)
		default:
			return nil, d.Errf("unknown pool option %q", d.Val())
		}
	}
	return p, nil
}

// unmarshalScale reads a comfyui pool's scale block:
//
//	scale {
//		min_workers <n>
//		max_workers <n>
//		worker_concurrency <n>
//		scale_down_delay <duration>
//		retry_after_max <duration>
//		target_queue_time <duration>
//	}
func unmarshalScale(d *caddyfile.Dispenser) (*ScaleConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	sc := new(ScaleConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		var v string
		if !d.AllArgs(&v) {
			return nil, d.ArgErr()
		}
		if into := map[string]*int{"min_workers": &sc.MinWorkers, "max_workers": &sc.MaxWorkers,
			"worker_concurrency": &sc.WorkerConcurrency}[name]; into != nil {
			n, err := strconv.Atoi(v)
			if err != nil {
				return nil, d.Errf("scale %s: %v", name, err)
			}
			*into = n
			continue
		}
		into := map[string]*caddy.Duration{"scale_down_delay": &sc.ScaleDownDelay, "retry_after_max": &sc.RetryAfterMax,
			"target_queue_time": &sc.TargetQueueTime}[name]
		if into == nil {
			return nil, d.Errf("unknown scale option %q", name)
		}
		if err := ParseDuration(v, into); err != nil {
			return nil, d.Errf("scale %s: %v", name, err)
		}
	}
	return sc, nil
}

// unmarshalPrice reads a pool's price block (whole credits, no fractions).
func unmarshalPrice(d *caddyfile.Dispenser) (*PriceConfig, error) {
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	price := new(PriceConfig)
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		name := d.Val()
		into := map[string]*int64{"per_job": &price.PerJob, "per_second": &price.PerSecond}[name]
		if into == nil {
			return nil, d.Errf("unknown price option %q (want per_job or per_second)", name)
		}
		var v string
		if !d.AllArgs(&v) {
			return nil, d.ArgErr()
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return nil, d.Errf("price %s: want whole credits: %v", name, err)
		}
		*into = n
	}
	return price, nil
}

func unmarshalWorker(d *caddyfile.Dispenser) (ComfyUIWorker, error) {
	var w ComfyUIWorker
	if !d.NextArg() {
		return w, d.ArgErr()
	}
	w.URL = d.Val()
	if d.NextArg() {
		return w, d.ArgErr()
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch d.Val() {
		case "header":
			var k, v string
			if !d.AllArgs(&k, &v) {
				return w, d.ArgErr()
			}
			if w.Headers == nil {
				w.Headers = map[string]string{}
			}
			w.Headers[k] = v
		case "concurrency":
			var v string
			if !d.AllArgs(&v) {
				return w, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return w, d.Errf("worker concurrency: %v", err)
			}
			w.Concurrency = n
		case "input_dir":
			if !d.AllArgs(&w.InputDir) {
				return w, d.ArgErr()
			}
		default:
			return w, d.Errf("unknown worker option %q", d.Val())
		}
	}
	return w, nil
}

// unmarshalDNS reads `workers dns <name> [<port>] { … }`.
func unmarshalDNS(d *caddyfile.Dispenser) (ComfyUIDNS, error) {
	var src ComfyUIDNS
	args := d.RemainingArgs()
	if len(args) < 2 || len(args) > 3 || args[0] != "dns" {
		return src, d.Err("want: workers dns <name> [<port>]")
	}
	src.Name = args[1]
	if len(args) == 3 {
		port, err := strconv.Atoi(args[2])
		if err != nil {
			return src, d.Errf("workers dns port: %v", err)
		}
		src.Port = port
	}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		switch name := d.Val(); name {
		case "refresh":
			var v string
			if !d.AllArgs(&v) {
				return src, d.ArgErr()
			}
			if err := ParseDuration(v, &src.Refresh); err != nil {
				return src, d.Errf("refresh: %v", err)
			}
		case "resolver", "scheme":
			into := map[string]*string{"resolver": &src.Resolver, "scheme": &src.Scheme}[name]
			if !d.AllArgs(into) {
				return src, d.ArgErr()
			}
		case "header":
			var k, v string
			if !d.AllArgs(&k, &v) {
				return src, d.ArgErr()
			}
			if src.Headers == nil {
				src.Headers = map[string]string{}
			}
			src.Headers[k] = v
		case "concurrency":
			var v string
			if !d.AllArgs(&v) {
				return src, d.ArgErr()
			}
			n, err := strconv.Atoi(v)
			if err != nil {
				return src, d.Errf("workers dns concurrency: %v", err)
			}
			src.Concurrency = n
		default:
			return src, d.Errf("unknown workers dns option %q", name)
		}
	}
	return src, nil
}
