package comfyui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/workflow"
)

// Pool is a set of ComfyUI workers that runs jobs; it implements
// jobs.Executor.
type Pool struct {
	cfg    Config
	logger *zap.Logger
	// list is the current workers (copy on write under wmu; see fleet.go).
	list    atomic.Pointer[[]*worker]
	wmu     sync.Mutex
	started bool // under wmu: Start ran, so added workers connect at once
	nextIdx int  // under wmu

	startOnce sync.Once
	closeOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu sync.Mutex

	// smu guards waiters: the Execute calls waiting for a worker, in
	// arrival order (see sched.go).
	smu     sync.Mutex
	waiters []*waiter
	// times learns warm and cold attempt times for model affinity.
	times runTimes
	// dials paces the workers' socket dials (see dialRate).
	dials *rate.Limiter
	// resolved is closed once every DNS source has had its first lookup.
	resolved chan struct{}
	pending  atomic.Int64 // DNS sources before their first lookup
	// index is the scheduler's view of the workers (guarded by smu).
	index schedIndex
	// capacity is the sum of the concurrencies of the workers not draining.
	capacity atomic.Int64
	// catGen counts catalog changes; union caches the unions of a gen.
	catGen atomic.Uint64
	union  atomic.Pointer[union]
	// onHealthy is called (in its own goroutine) when a worker becomes
	// healthy; see OnHealthy.
	onHealthy atomic.Pointer[func()]
	// known is the last union that had a catalog: what a pool whose
	// workers are all gone (scaled to zero) validates against.
	known atomic.Pointer[union]
}

// OnHealthy sets what is called, in its own goroutine, each time a worker
// of the pool becomes healthy (the scale signal's cold start ends there).
func (p *Pool) OnHealthy(f func()) { p.onHealthy.Store(&f) }

func (p *Pool) becameHealthy() {
	if f := p.onHealthy.Load(); f != nil && *f != nil {
		go (*f)()
	}
}

// New validates cfg and builds a pool. It does no network I/O; Start does.
func New(cfg Config, logger *zap.Logger) (*Pool, error) {
	cfg.Workers = append([]WorkerConfig(nil), cfg.Workers...)
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	if err := resolveInputDirs(cfg.Workers, logger); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{cfg: cfg, logger: logger, ctx: ctx, cancel: cancel,
		dials: rate.NewLimiter(dialRate, dialBurst), index: newSchedIndex(), resolved: make(chan struct{})}
	p.pending.Store(int64(len(cfg.DNS)))
	if len(cfg.DNS) == 0 {
		close(p.resolved)
	}
	var workers []*worker
	for _, wc := range cfg.Workers {
		w, err := newWorker(p, p.nextIdx, wc, sourceStatic)
		if err != nil {
			cancel()
			return nil, err
		}
		p.nextIdx++
		workers = append(workers, w)
		p.capacity.Add(int64(wc.Concurrency))
	}
	p.list.Store(&workers)
	return p, nil
}

// all is the current workers, in the order they joined.
func (p *Pool) all() []*worker { return *p.list.Load() }

// Start connects to the workers. It is idempotent and returns at once.
func (p *Pool) Start() {
	p.startOnce.Do(func() {
		p.wmu.Lock()
		defer p.wmu.Unlock()
		if p.ctx.Err() != nil {
			return // closed before it started
		}
		p.started = true
		for _, w := range p.all() {
			p.launch(w)
		}
		for _, src := range p.cfg.DNS {
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.discover(p.ctx, src) }()
		}
	})
}

// Close stops every connection and background task and waits for them.
// Attempts still running return jobs.WorkerLostError.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		p.wmu.Lock()
		p.mu.Lock()
		p.cancel() // under mu and wmu: cleanupLater and launch never add to wg after this
		p.mu.Unlock()
		p.wmu.Unlock()
		p.wg.Wait()
	})
	return nil
}

// Capacity is the sum of the concurrencies of the workers that take jobs
// (draining ones do not): how many attempts the dispatcher should run at
// once. It changes as workers come and go.
func (p *Pool) Capacity() int { return int(p.capacity.Load()) }

// touch re-files w in the scheduler's index after a change of its state
// and wakes what waits for one.
func (p *Pool) touch(w *worker) {
	p.reindex(w)
	p.notify()
}

// WorkerState is what the pool knows of one worker right now (the admin
// API's and the console's JSON).
type WorkerState struct {
	// URL is the worker's base URL with any password redacted.
	URL     string `json:"url"`
	Healthy bool   `json:"healthy"`
	// UnhealthyReason says why a worker is not healthy: it has not
	// answered yet, its socket ended without a shutdown notice, it stopped
	// answering, or its answers could not be matched to its prompts.
	UnhealthyReason string `json:"unhealthy_reason,omitempty"`
	// Running is how many of this pool's attempts the worker has in
	// flight, out of Capacity.
	Running  int `json:"running"`
	Capacity int `json:"capacity"`
	// Models are the models its recent executions loaded, least recent
	// first (what model affinity believes it holds).
	Models []string `json:"models"`
	// Source is where the worker came from: config, dns or admin.
	Source string `json:"source"`
	// Draining: it takes no new job while the ones it runs finish. Why is
	// DrainReason: "admin" or "dns:<name>" (removed: it leaves the pool
	// when its running jobs end) or "shutdown" (it announced its shutdown:
	// it takes jobs again once it is back).
	Draining    bool   `json:"draining"`
	DrainReason string `json:"drain_reason,omitempty"`
}

// Available counts the workers that take jobs now: healthy and not
// draining.
func (p *Pool) Available() int {
	n, _ := p.available()
	return n
}

// Slots is the sum of the concurrencies of the workers that take jobs now
// (healthy, not draining): how many attempts the dispatcher should run at
// once. Unlike Capacity it leaves out workers still starting, so that no
// job is claimed for a worker in its cold start (a claimed job waits at
// most UnhealthyAfter for a healthy worker, then counts as lost).
func (p *Pool) Slots() int {
	_, slots := p.available()
	return slots
}

func (p *Pool) available() (workers, slots int) {
	for _, w := range p.all() {
		w.mu.Lock()
		if w.healthy && w.takesJobs() {
			workers++
			slots += w.cfg.Concurrency
		}
		w.mu.Unlock()
	}
	return workers, slots
}

// Workers reports every worker's state, in the order they joined.
func (p *Pool) Workers() []WorkerState {
	workers := p.all()
	states := make([]WorkerState, len(workers))
	for i, w := range workers {
		w.mu.Lock()
		states[i] = WorkerState{URL: w.base.Redacted(), Healthy: w.healthy, Running: w.inflight, Capacity: w.cfg.Concurrency,
			Models: slices.Clone(w.models.models), Source: w.source, Draining: !w.takesJobs()}
		if !w.healthy {
			states[i].UnhealthyReason = w.reason
		}
		switch {
		case w.draining:
			states[i].DrainReason = w.drainedBy
		case w.stopping:
			states[i].DrainReason = "shutdown"
		}
		w.mu.Unlock()
	}
	return states
}

// notify hands free workers to waiting Execute calls after a change of a
// worker's health, catalog or free slots.
func (p *Pool) notify() { p.schedule() }

// errNoCatalog is what Catalog answers while no worker has answered: 503
// service_unavailable with a Retry-After, so clients retry the submission.
var errNoCatalog = apierr.New(http.StatusServiceUnavailable, "service_unavailable",
	"no ComfyUI worker of this pool is reachable yet").WithRetryAfter(5)

// Catalog is the union of the healthy workers' catalogs; a class only some
// workers have is included, and Execute sends graphs using it only to those.
// When no worker has answered, Catalog waits (bounded by ctx and
// RequestTimeout) for every worker's first connection attempt, then returns
// the last union a healthy worker made (a pool scaled to zero keeps taking
// jobs, which queue), or a 503 *apierr.Error when there never was one.
func (p *Pool) Catalog(ctx context.Context) (workflow.Catalog, error) {
	if cat := p.unionCatalog(); cat != nil {
		return cat, nil
	}
	if err := p.awaitFirstTries(ctx); err != nil {
		return nil, err
	}
	if cat := p.unionCatalog(); cat != nil {
		return cat, nil
	}
	if u := p.known.Load(); u != nil {
		return u.cat, nil // no worker now: submissions queue for the next one
	}
	return nil, errNoCatalog
}

// ObjectInfo is the union of the healthy workers' /object_info answers as
// they sent them, class by class (the first worker's entry of a class
// wins), for clients that read the catalog itself. It waits as Catalog does.
func (p *Pool) ObjectInfo(ctx context.Context) (map[string]json.RawMessage, error) {
	if info := p.unionObjectInfo(); info != nil {
		return info, nil
	}
	if err := p.awaitFirstTries(ctx); err != nil {
		return nil, err
	}
	if info := p.unionObjectInfo(); info != nil {
		return info, nil
	}
	if u := p.known.Load(); u != nil {
		return u.info, nil
	}
	return nil, errNoCatalog
}

func (p *Pool) unionObjectInfo() map[string]json.RawMessage {
	return p.unions().info
}

// awaitFirstTries starts the pool and waits (bounded by ctx and
// RequestTimeout) until every worker's first connection attempt is over.
func (p *Pool) awaitFirstTries(ctx context.Context) error {
	p.Start()
	timer := time.NewTimer(p.cfg.RequestTimeout)
	defer timer.Stop()
	select { // the DNS sources' first answers name workers to wait for
	case <-p.resolved:
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return errNoCatalog
	}
	for _, w := range p.all() {
		select {
		case <-w.firstTry:
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
			return errNoCatalog
		}
	}
	return nil
}

// classSpec is a class of the first healthy worker that has it.
func (p *Pool) classSpec(name string) (workflow.NodeClass, bool) {
	for _, w := range p.all() {
		if cat, healthy := w.catalogIfHealthy(); healthy {
			if c, ok := cat[name]; ok {
				return c, true
			}
		}
	}
	return workflow.NodeClass{}, false
}

func (p *Pool) unionCatalog() workflow.Catalog { return p.unions().cat }

// union is the pool's catalog and object_info as of a catalog generation.
type union struct {
	gen  uint64
	cat  workflow.Catalog
	info map[string]json.RawMessage
}

// catalogChanged marks the unions stale: a worker's catalog or health
// changed, or a worker left.
func (p *Pool) catalogChanged() { p.catGen.Add(1) }

// unions returns the union of the healthy workers' catalogs, rebuilt only
// after a change (every submission validates against it; merging a
// hundred catalogs each time would cost more than the rest of a submit).
func (p *Pool) unions() *union {
	gen := p.catGen.Load()
	if u := p.union.Load(); u != nil && u.gen == gen {
		return u
	}
	workers := p.all()
	u := &union{gen: gen, cat: unionOf(workers, (*worker).catalogIfHealthy),
		info: unionOf(workers, (*worker).objectInfoIfHealthy)}
	p.union.Store(u)
	if u.cat != nil {
		p.known.Store(u)
	}
	return u
}

// unionOf merges, class by class, what get returns for each healthy worker
// (the first worker's entry of a class wins); nil when none has answered.
func unionOf[M ~map[string]V, V any](workers []*worker, get func(*worker) (M, bool)) M {
	var union M
	for _, w := range workers {
		classes, healthy := get(w)
		if !healthy || classes == nil {
			continue
		}
		if union == nil {
			union = M{}
		}
		for name, class := range classes {
			if _, ok := union[name]; !ok {
				union[name] = class
			}
		}
	}
	return union
}

// Free asks the worker at url (as configured) to unload its models (POST
// /free, as ComfyUI's own "unload models" button does) and forgets what
// model affinity believed it held.
func (p *Pool) Free(ctx context.Context, url string) error {
	for _, w := range p.all() {
		if w.cfg.URL == url {
			_, err := w.postJSON(ctx, "/free", map[string]bool{"unload_models": true, "free_memory": true})
			w.forgetModels()
			return err
		}
	}
	return fmt.Errorf("%w: %s", ErrNoWorker, url)
}
