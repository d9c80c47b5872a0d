package comfygate

import (
	"fmt"
	"regexp"

	"github.com/caddyserver/caddy/v2"

	"github.com/comfygate/comfygate/modules/jobs"
)

// Pool kinds.
const (
	KindBuiltin = "builtin"
	KindComfyUI = "comfyui"
)

// BuiltinPool is the name of the built-in pool, which always exists.
const BuiltinPool = "builtin"

// PoolConfig is one worker pool jobs run on.
type PoolConfig struct {
	// Name identifies the pool; `comfy_jobs <name>` submits to it.
	Name string `json:"name,omitempty"`
	// Kind is builtin (the in-process executor of core image nodes) or
	// comfyui (a set of ComfyUI servers).
	Kind string `json:"kind,omitempty"`
	// Concurrency is, for a builtin pool, how many jobs run at once in this
	// process. Default: the jobs block's concurrency.
	Concurrency int `json:"concurrency,omitempty"`
	// Workers are, for a comfyui pool, the ComfyUI servers.
	Workers []ComfyUIWorker `json:"workers,omitempty"`
	// Refresh is, for a comfyui pool, how often each worker's /object_info
	// is re-read. Default 5m.
	Refresh caddy.Duration `json:"refresh,omitempty"`
}

// ComfyUIWorker is one ComfyUI server of a comfyui pool.
type ComfyUIWorker struct {
	// URL is the server's base URL, e.g. http://127.0.0.1:8188.
	URL string `json:"url,omitempty"`
	// Headers are sent on every request to the server (e.g. a token).
	// Values accept {env.X}.
	Headers map[string]string `json:"headers,omitempty"`
	// Concurrency is how many jobs the server runs at once. Default 1.
	Concurrency int `json:"concurrency,omitempty"`
}

var poolName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)

// poolsWithDefaults returns the configured pools plus the built-in pool
// when it is not configured.
func (a *App) poolsWithDefaults() []*PoolConfig {
	pools := a.Pools
	for _, p := range pools {
		if p.Name == BuiltinPool {
			return pools
		}
	}
	return append(pools, &PoolConfig{Name: BuiltinPool, Kind: KindBuiltin})
}

func (a *App) validatePools() error {
	seen := map[string]bool{}
	for _, p := range a.Pools {
		if !poolName.MatchString(p.Name) {
			return fmt.Errorf("comfygate: pool name %q must be 1-64 lowercase letters, digits, - or _", p.Name)
		}
		if seen[p.Name] {
			return fmt.Errorf("comfygate: pool %q is configured twice", p.Name)
		}
		seen[p.Name] = true
		switch p.Kind {
		case KindBuiltin:
			if len(p.Workers) > 0 {
				return fmt.Errorf("comfygate: builtin pool %q takes no workers", p.Name)
			}
		case KindComfyUI:
			if len(p.Workers) == 0 {
				return fmt.Errorf("comfygate: comfyui pool %q needs at least one worker", p.Name)
			}
		default:
			return fmt.Errorf("comfygate: pool %q has unknown kind %q (want builtin or comfyui)", p.Name, p.Kind)
		}
	}
	if a.JobsConfig.DefaultPool != "" && !seen[a.JobsConfig.DefaultPool] && a.JobsConfig.DefaultPool != BuiltinPool {
		return fmt.Errorf("comfygate: jobs default_pool %q is not a configured pool", a.JobsConfig.DefaultPool)
	}
	return nil
}

// HasPool reports whether name is a pool of this configuration.
func (a *App) HasPool(name string) bool {
	_, ok := a.executors[name]
	return ok
}

// poolExecutor is a pool's executor and how many attempts it runs at once
// in this process.
type poolExecutor struct {
	exec     jobs.Executor
	capacity int
	start    func()
}

// provisionPools builds each pool's executor. Nothing connects here; a
// comfyui pool starts its connections when the app starts.
func (a *App) provisionPools() error {
	a.executors = map[string]poolExecutor{}
	for _, p := range a.poolsWithDefaults() {
		switch p.Kind {
		case KindBuiltin:
			n := p.Concurrency
			if n == 0 {
				n = a.JobsConfig.Concurrency
			}
			a.executors[p.Name] = poolExecutor{exec: new(jobs.BuiltinExecutor), capacity: n}
		default:
			return fmt.Errorf("comfygate: pool %q: kind %q is not available in this build", p.Name, p.Kind)
		}
	}
	return nil
}
