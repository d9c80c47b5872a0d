package comfygate

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/credits"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/membudget"
	"github.com/comfygate/comfygate/storage"
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
	// JobMemory bounds, for a builtin pool, the memory one job holds at
	// once, in bytes (at most the app's builtin_memory). A workflow that
	// needs more fails: at submit (422 invalid_workflow) when its widgets
	// alone show it, else before its first node, or at the node that
	// crosses it (node_execution_error). Default 512 MiB, or builtin_memory
	// when that is smaller.
	JobMemory int64 `json:"job_memory,omitempty"`
	// Workers are, for a comfyui pool, the ComfyUI servers.
	Workers []ComfyUIWorker `json:"workers,omitempty"`
	// DNS are, for a comfyui pool, names whose addresses are workers,
	// re-resolved every refresh: a worker that leaves the answer drains.
	DNS []ComfyUIDNS `json:"dns,omitempty"`
	// Refresh is, for a comfyui pool, how often each worker's /object_info
	// is re-read (it is also re-read on every reconnect). Default 1m.
	Refresh caddy.Duration `json:"refresh,omitempty"`
	// UnhealthyAfter is, for a comfyui pool, how long a worker may stop
	// answering before it leaves rotation and its jobs are handed to another
	// worker. Default 30s.
	UnhealthyAfter caddy.Duration `json:"unhealthy_after,omitempty"`
	// ReconnectMax caps, for a comfyui pool, the backoff between WebSocket
	// reconnects. Default 10s.
	ReconnectMax caddy.Duration `json:"reconnect_max,omitempty"`
	// RequestTimeout bounds, for a comfyui pool, one HTTP request to a
	// worker, output downloads and input uploads included. Default 60s.
	RequestTimeout caddy.Duration `json:"request_timeout,omitempty"`
	// Dispatch is, for a comfyui pool, how a job's worker is picked:
	// "affinity" (default) prefers a worker whose recent executions loaded
	// the job's models and waits up to affinity_wait for a busy one before
	// taking a cold worker; "least_busy" takes the least loaded worker.
	Dispatch string `json:"dispatch,omitempty"`
	// AffinityWait is, for a comfyui pool with affinity dispatch, how long
	// a job waits for a busy worker that holds its models. Default 3s.
	AffinityWait caddy.Duration `json:"affinity_wait,omitempty"`
	// AffinityModels is, for a comfyui pool, how many models per worker
	// affinity remembers (its most recent executions'). Default 4.
	AffinityModels int `json:"affinity_models,omitempty"`
	// Price, when set, makes the pool's jobs cost credits: each job
	// reserves its maximum from its account's credit balance at submit
	// (402 insufficient_credits when the balance cannot cover it) and is
	// charged at its end. Without it the pool's jobs are free and touch
	// no ledger.
	Price *PriceConfig `json:"price,omitempty"`
	// MaxCharge caps what one job of the pool is charged, and so what it
	// reserves; default per_job + per_second × the jobs block's
	// running_bound. Needs a price.
	MaxCharge int64 `json:"max_charge,omitempty"`
	// AccountMaxQueued and AccountMaxRunning bound one account's queued and
	// running jobs in this pool (over max_queued: 429 queue_full for that
	// account only; at max_running its further jobs wait while other
	// accounts' run). Default: the jobs block's; 0 = unbounded.
	AccountMaxQueued  int `json:"account_max_queued,omitempty"`
	AccountMaxRunning int `json:"account_max_running,omitempty"`
	// Scale bounds, for a comfyui pool, its scale signal (see
	// docs/comfyui.md, "Elastic fleets").
	Scale *ScaleConfig `json:"scale,omitempty"`
}

// ScaleConfig is a comfyui pool's scale signal: the workers it needs, for
// an autoscaler to follow.
type ScaleConfig struct {
	// MinWorkers and MaxWorkers bound the signal. Default 0 and unbounded.
	MinWorkers int `json:"min_workers,omitempty"`
	MaxWorkers int `json:"max_workers,omitempty"`
	// WorkerConcurrency is how many jobs one added worker runs at once.
	// Default 1.
	WorkerConcurrency int `json:"worker_concurrency,omitempty"`
	// ScaleDownDelay is how long the signal keeps a count after the need
	// for it was last seen, so that workers are not removed between two
	// bursts. Default 5m.
	ScaleDownDelay caddy.Duration `json:"scale_down_delay,omitempty"`
	// RetryAfterMax bounds the Retry-After of a deployment_not_ready
	// answered while the pool has no worker: the pool's measured cold
	// start, at most this. Default 2m.
	RetryAfterMax caddy.Duration `json:"retry_after_max,omitempty"`
	// TargetQueueTime sizes the pool by the work queued rather than by the
	// number of jobs: the workers that run the queued and running jobs
	// (at the pool's mean recent job time) within this time, at most one
	// per worker_concurrency jobs. Default: the pool's measured cold start
	// (one worker per worker_concurrency jobs until one was measured).
	TargetQueueTime caddy.Duration `json:"target_queue_time,omitempty"`
}

// Defaults of ScaleConfig.
const (
	DefaultScaleDownDelay = 5 * time.Minute
	DefaultRetryAfterMax  = 2 * time.Minute
)

func (p *PoolConfig) validateScale() error {
	s := p.Scale
	if s == nil {
		return nil
	}
	switch {
	case s.MinWorkers < 0 || s.MaxWorkers < 0 || s.WorkerConcurrency < 0 || s.ScaleDownDelay < 0 || s.RetryAfterMax < 0 || s.TargetQueueTime < 0:
		return fmt.Errorf("comfygate: pool %q: scale bounds must not be negative", p.Name)
	case s.MaxWorkers > 0 && s.MinWorkers > s.MaxWorkers:
		return fmt.Errorf("comfygate: pool %q: min_workers %d is above max_workers %d", p.Name, s.MinWorkers, s.MaxWorkers)
	}
	return nil
}

// PriceConfig is a pool's job price in whole credits.
type PriceConfig struct {
	// PerJob is charged once for every job that runs.
	PerJob int64 `json:"per_job,omitempty"`
	// PerSecond is charged per second the job's attempt ran (to the
	// millisecond; the charge is rounded up to a whole credit).
	PerSecond int64 `json:"per_second,omitempty"`
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
	// InputDir is the server's ComfyUI input directory (ComfyUI/input, or
	// its --input-directory) as the gateway sees it, for a gateway running
	// beside ComfyUI. When set, the folder comfygate/<job id> that a job's
	// inputs were staged into is removed from it when each attempt ends,
	// whatever the outcome; ComfyUI has no HTTP route that deletes inputs.
	// Without it, staged inputs stay on the server. Accepts {env.X}.
	InputDir string `json:"input_dir,omitempty"`
}

// ComfyUIDNS is a DNS name whose addresses are ComfyUI workers.
type ComfyUIDNS struct {
	// Name is an SRV name when it starts with an underscore
	// (_comfyui._tcp.example.com; each target's addresses with the
	// record's port), else an A/AAAA name.
	Name string `json:"name,omitempty"`
	// Port is the workers' port for an A/AAAA name. Default 8188.
	Port int `json:"port,omitempty"`
	// Scheme is http (default) or https.
	Scheme string `json:"scheme,omitempty"`
	// Refresh is how often the name is re-resolved. Default: the pool's
	// refresh (1m).
	Refresh caddy.Duration `json:"refresh,omitempty"`
	// Resolver is the DNS server (host:port) to ask; default the system's.
	Resolver string `json:"resolver,omitempty"`
	// Headers are sent to every worker of the name. Values accept {env.X}.
	Headers map[string]string `json:"headers,omitempty"`
	// Concurrency is how many jobs each worker runs at once. Default 1.
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
			if p.JobMemory < 0 || p.JobMemory > a.BuiltinMemory {
				return fmt.Errorf("comfygate: builtin pool %q: job_memory must be positive and at most builtin_memory (%d bytes)", p.Name, a.BuiltinMemory)
			}
		case KindComfyUI:
			if p.JobMemory != 0 {
				return fmt.Errorf("comfygate: pool %q: job_memory bounds builtin pools only (a ComfyUI worker's memory is its own)", p.Name)
			}
			// No worker at all is a pool at zero: workers come from the
			// admin API (an autoscaler following the scale signal).
			if err := p.validateScale(); err != nil {
				return err
			}
		default:
			return fmt.Errorf("comfygate: pool %q has unknown kind %q (want builtin or comfyui)", p.Name, p.Kind)
		}
		if _, err := a.poolPrice(p); err != nil {
			return err
		}
		if p.AccountMaxQueued < 0 || p.AccountMaxRunning < 0 {
			return fmt.Errorf("comfygate: pool %q: account_max_queued and account_max_running must not be negative", p.Name)
		}
	}
	if a.JobsConfig.DefaultPool != "" && !seen[a.JobsConfig.DefaultPool] && a.JobsConfig.DefaultPool != BuiltinPool {
		return fmt.Errorf("comfygate: jobs default_pool %q is not a configured pool", a.JobsConfig.DefaultPool)
	}
	return nil
}

// poolPrice is the storage price of p's jobs, nil for a free pool.
func (a *App) poolPrice(p *PoolConfig) (*storage.JobPrice, error) {
	if p.Price == nil {
		if p.MaxCharge != 0 {
			return nil, fmt.Errorf("comfygate: pool %q: max_charge needs a price", p.Name)
		}
		return nil, nil
	}
	jp, err := credits.Price{PerJob: p.Price.PerJob, PerSecond: p.Price.PerSecond, MaxCharge: p.MaxCharge}.
		JobPrice(time.Duration(a.JobsConfig.RunningBound))
	if err != nil {
		return nil, fmt.Errorf("comfygate: pool %q: %w", p.Name, err)
	}
	return &jp, nil
}

// accountBounds are p's per-account queued and running bounds.
func (a *App) accountBounds(p *PoolConfig) (maxQueued, maxRunning int) {
	maxQueued, maxRunning = p.AccountMaxQueued, p.AccountMaxRunning
	if maxQueued == 0 {
		maxQueued = a.JobsConfig.AccountMaxQueued
	}
	if maxRunning == 0 {
		maxRunning = a.JobsConfig.AccountMaxRunning
	}
	return maxQueued, maxRunning
}

// HasPool reports whether name is a pool of this configuration.
func (a *App) HasPool(name string) bool {
	_, ok := a.executors[name]
	return ok
}

// PoolReady reports whether name is a pool of this configuration with a
// worker that can take jobs now: the built-in pools always, a comfyui
// pool while one of its workers is healthy and not draining.
func (a *App) PoolReady(name string) bool {
	pe, ok := a.executors[name]
	if !ok || pe.workers == nil {
		return ok
	}
	for _, w := range pe.workers() {
		if w.Healthy && !w.Draining {
			return true
		}
	}
	return false
}

// poolExecutor is a pool's executor and how many attempts it runs at once
// in this process, with the pool's price and per-account bounds.
type poolExecutor struct {
	kind     string
	exec     jobs.Executor
	capacity int
	// slots is a comfyui pool's slots now: its healthy workers' that
	// take jobs, as they come and go; nil for a builtin pool.
	slots func() int
	start func()
	// workers reports a comfyui pool's workers; nil for a builtin pool.
	workers func() []comfyui.WorkerState
	price   *storage.JobPrice
	// accountMaxQueued and accountMaxRunning: see PoolConfig.
	accountMaxQueued, accountMaxRunning int
}

// PoolState is what this process knows of one pool now.
type PoolState struct {
	Name, Kind string
	// Capacity is how many attempts the pool runs at once in this process.
	Capacity int
	// Workers are a comfyui pool's servers; a builtin pool has none (it
	// runs in this process and is always healthy).
	Workers []comfyui.WorkerState
}

// PoolStates reports every pool, by name.
func (a *App) PoolStates() []PoolState {
	states := make([]PoolState, 0, len(a.executors))
	for name, pe := range a.executors {
		st := PoolState{Name: name, Kind: pe.kind, Capacity: pe.capacity}
		if pe.slots != nil {
			st.Capacity = pe.slots()
		}
		if pe.workers != nil {
			st.Workers = pe.workers()
		}
		states = append(states, st)
	}
	slices.SortFunc(states, func(x, y PoolState) int { return strings.Compare(x.Name, y.Name) })
	return states
}

// provisionPools builds each pool's executor. Nothing connects here; a
// comfyui pool starts its connections when the app starts.
func (a *App) provisionPools() error {
	a.executors = map[string]poolExecutor{}
	var memory *membudget.Budget
	for _, p := range a.poolsWithDefaults() {
		var pe poolExecutor
		switch p.Kind {
		case KindBuiltin:
			n := p.Concurrency
			if n == 0 {
				n = a.JobsConfig.Concurrency
			}
			if memory == nil {
				var err error
				if memory, err = a.builtinMemory(); err != nil {
					return err
				}
			}
			jobMemory := p.JobMemory
			if jobMemory == 0 {
				jobMemory = min(DefaultJobMemory, a.BuiltinMemory)
			}
			pe = poolExecutor{kind: KindBuiltin, exec: &jobs.BuiltinExecutor{Memory: memory, JobMemory: jobMemory}, capacity: n}
		case KindComfyUI:
			var err error
			if pe, err = a.comfyUIPool(p); err != nil {
				return err
			}
		}
		price, err := a.poolPrice(p)
		if err != nil {
			return err
		}
		pe.price = price
		pe.accountMaxQueued, pe.accountMaxRunning = a.accountBounds(p)
		a.executors[p.Name] = pe
	}
	return nil
}

// builtinMemory is the process's budget for built-in jobs, shared by every
// builtin pool and kept across a reload that keeps its size (jobs that
// run on through the reload still hold their part of it).
func (a *App) builtinMemory() (*membudget.Budget, error) {
	key := fmt.Sprintf("builtin_memory:%d", a.BuiltinMemory)
	val, _, err := pool.LoadOrNew(key, func() (caddy.Destructor, error) {
		return memoryBudget{membudget.New(a.BuiltinMemory)}, nil
	})
	if err != nil {
		return nil, err
	}
	a.poolKeys = append(a.poolKeys, key)
	return val.(memoryBudget).Budget, nil
}

// memoryBudget holds a budget in the usage pool; it has nothing to close.
type memoryBudget struct{ *membudget.Budget }

func (memoryBudget) Destruct() error { return nil }

// comfyUIPool returns the shared ComfyUI pool for p's configuration: a
// reload that keeps the configuration keeps its connections.
func (a *App) comfyUIPool(p *PoolConfig) (poolExecutor, error) {
	repl := caddy.NewReplacer()
	cfg := comfyui.Config{
		RefreshInterval: time.Duration(p.Refresh),
		ReconnectMax:    time.Duration(p.ReconnectMax),
		RequestTimeout:  time.Duration(p.RequestTimeout),
		UnhealthyAfter:  time.Duration(p.UnhealthyAfter),
		Dispatch:        p.Dispatch,
		AffinityWait:    time.Duration(p.AffinityWait),
		AffinityModels:  p.AffinityModels,
	}
	for _, w := range p.Workers {
		headers := make(map[string]string, len(w.Headers))
		for k, v := range w.Headers {
			headers[k] = repl.ReplaceKnown(v, "")
		}
		cfg.Workers = append(cfg.Workers, comfyui.WorkerConfig{URL: w.URL, Headers: headers, Concurrency: w.Concurrency,
			InputDir: repl.ReplaceKnown(w.InputDir, "")})
	}
	for _, d := range p.DNS {
		headers := make(map[string]string, len(d.Headers))
		for k, v := range d.Headers {
			headers[k] = repl.ReplaceKnown(v, "")
		}
		cfg.DNS = append(cfg.DNS, comfyui.DNSConfig{Name: d.Name, Port: d.Port, Scheme: d.Scheme,
			Refresh: time.Duration(d.Refresh), Resolver: d.Resolver, Headers: headers, Concurrency: d.Concurrency})
	}
	key, err := json.Marshal(struct {
		Name string
		Cfg  comfyui.Config
	}{p.Name, cfg})
	if err != nil {
		return poolExecutor{}, err
	}
	val, _, err := pool.LoadOrNew("comfyui:"+string(key), func() (caddy.Destructor, error) {
		cp, err := comfyui.New(cfg, a.logger.Named("comfyui").With(zap.String("pool", p.Name)))
		if err != nil {
			return nil, fmt.Errorf("comfygate: pool %q: %w", p.Name, err)
		}
		return comfyUIDestructor{cp}, nil
	})
	if err != nil {
		return poolExecutor{}, err
	}
	a.poolKeys = append(a.poolKeys, "comfyui:"+string(key))
	cp := val.(comfyUIDestructor).Pool
	comfyui.Register(p.Name, cp)
	name := p.Name
	cp.OnHealthy(func() {
		a.wakeDispatcher(name)
		a.demandMet(name)
	})
	return poolExecutor{kind: KindComfyUI, exec: cp, capacity: cp.Capacity(), slots: cp.Slots, start: cp.Start,
		workers: cp.Workers}, nil
}

// comfyUIDestructor closes a ComfyUI pool when no configuration uses it.
type comfyUIDestructor struct{ *comfyui.Pool }

func (d comfyUIDestructor) Destruct() error {
	comfyui.Unregister(d.Pool)
	return d.Close()
}
