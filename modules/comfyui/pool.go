package comfyui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/comfygate/comfygate/modules/apierr"
	"github.com/comfygate/comfygate/modules/jobs"
	"github.com/comfygate/comfygate/modules/workflow"
)

// Pool is a set of ComfyUI workers that runs jobs; it implements
// jobs.Executor.
type Pool struct {
	cfg     Config
	logger  *zap.Logger
	workers []*worker

	startOnce sync.Once
	closeOnce sync.Once
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu sync.Mutex
	// changed is closed and replaced whenever a worker's health, catalog or
	// free slots change, waking Execute calls that wait for a worker.
	changed chan struct{}
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
	p := &Pool{cfg: cfg, logger: logger, ctx: ctx, cancel: cancel, changed: make(chan struct{})}
	for i, wc := range cfg.Workers {
		w, err := newWorker(p, i, wc)
		if err != nil {
			cancel()
			return nil, err
		}
		p.workers = append(p.workers, w)
	}
	return p, nil
}

// Start connects to the workers. It is idempotent and returns at once.
func (p *Pool) Start() {
	p.startOnce.Do(func() {
		if p.ctx.Err() != nil {
			return // closed before it started
		}
		for _, w := range p.workers {
			p.wg.Add(2)
			go func() { defer p.wg.Done(); w.connectLoop(p.ctx) }()
			go func() { defer p.wg.Done(); w.probeLoop(p.ctx) }()
		}
	})
}

// Close stops every connection and background task and waits for them.
// Attempts still running return jobs.WorkerLostError.
func (p *Pool) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.cancel() // under mu: cleanupLater never adds to wg after this
		p.mu.Unlock()
		p.wg.Wait()
	})
	return nil
}

// Capacity is the sum of the workers' concurrencies: how many attempts the
// dispatcher should run at once.
func (p *Pool) Capacity() int {
	n := 0
	for _, w := range p.workers {
		n += w.cfg.Concurrency
	}
	return n
}

// WorkerState is what the pool knows of one worker right now.
type WorkerState struct {
	// URL is the worker's base URL with any password redacted.
	URL     string
	Healthy bool
	// Running is how many of this pool's attempts the worker has in
	// flight, out of Capacity.
	Running, Capacity int
}

// Workers reports every worker's state, in configuration order.
func (p *Pool) Workers() []WorkerState {
	states := make([]WorkerState, len(p.workers))
	for i, w := range p.workers {
		w.mu.Lock()
		states[i] = WorkerState{URL: w.base.Redacted(), Healthy: w.healthy, Running: w.inflight, Capacity: w.cfg.Concurrency}
		w.mu.Unlock()
	}
	return states
}

// notify wakes everything waiting for a change of the pool's state.
func (p *Pool) notify() {
	p.mu.Lock()
	close(p.changed)
	p.changed = make(chan struct{})
	p.mu.Unlock()
}

func (p *Pool) changes() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.changed
}

// errNoCatalog is what Catalog answers while no worker has answered: 503
// service_unavailable with a Retry-After, so clients retry the submission.
var errNoCatalog = apierr.New(http.StatusServiceUnavailable, "service_unavailable",
	"no ComfyUI worker of this pool is reachable yet").WithRetryAfter(5)

// Catalog is the union of the healthy workers' catalogs; a class only some
// workers have is included, and Execute sends graphs using it only to those.
// When no worker has answered, Catalog waits (bounded by ctx and
// RequestTimeout) for every worker's first connection attempt, then returns
// a 503 *apierr.Error.
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
	return nil, errNoCatalog
}

func (p *Pool) unionObjectInfo() map[string]json.RawMessage {
	return unionOf(p.workers, (*worker).objectInfoIfHealthy)
}

// awaitFirstTries starts the pool and waits (bounded by ctx and
// RequestTimeout) until every worker's first connection attempt is over.
func (p *Pool) awaitFirstTries(ctx context.Context) error {
	p.Start()
	timer := time.NewTimer(p.cfg.RequestTimeout)
	defer timer.Stop()
	for _, w := range p.workers {
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

func (p *Pool) unionCatalog() workflow.Catalog {
	return unionOf(p.workers, (*worker).catalogIfHealthy)
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

// acquire reserves a slot on a healthy worker that has every class, the
// least loaded first. It waits while all such workers are busy; when no
// healthy worker has the classes for UnhealthyAfter it returns
// jobs.WorkerLostError.
func (p *Pool) acquire(ctx context.Context, classes []string) (*worker, error) {
	var noneSince time.Time
	for {
		changed := p.changes()
		w, anyCandidate := p.pick(classes)
		if w != nil {
			return w, nil
		}
		now := time.Now()
		switch {
		case anyCandidate:
			noneSince = time.Time{}
		case noneSince.IsZero():
			noneSince = now
		case now.Sub(noneSince) >= p.cfg.UnhealthyAfter:
			return nil, &jobs.WorkerLostError{Err: fmt.Errorf("no healthy ComfyUI worker has the classes %v", classes)}
		}
		wait := p.cfg.UnhealthyAfter
		if !noneSince.IsZero() {
			wait = p.cfg.UnhealthyAfter - now.Sub(noneSince)
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-p.ctx.Done():
			timer.Stop()
			return nil, &jobs.WorkerLostError{Err: errPoolClosed}
		case <-changed:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// pick takes a slot on the best worker; anyCandidate reports whether some
// healthy worker has the classes (even if it is busy).
func (p *Pool) pick(classes []string) (best *worker, anyCandidate bool) {
	type cand struct {
		w    *worker
		load float64
	}
	var cands []cand
	for _, w := range p.workers {
		load, ok := w.candidate(classes)
		if !ok {
			continue
		}
		anyCandidate = true
		if load >= 0 {
			cands = append(cands, cand{w, load})
		}
	}
	sort.SliceStable(cands, func(i, j int) bool { return cands[i].load < cands[j].load })
	for _, c := range cands {
		if c.w.reserve() {
			p.notify()
			return c.w, true
		}
	}
	return nil, anyCandidate
}
