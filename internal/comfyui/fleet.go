package comfyui

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Dynamic workers. Besides the configured ones, workers come from DNS
// sources (re-resolved every refresh) and from AddWorker (the admin API).
// A worker that leaves its source, or is removed, drains: it takes no new
// job, and leaves the pool (its socket and probes stop) when the attempts
// running on it end. Jobs on a worker that vanishes without draining are
// handed on as before (jobs.WorkerLostError after UnhealthyAfter).

// Worker sources (WorkerState.Source); a DNS source is "dns:" + its name.
const (
	sourceStatic = "config"
	sourceAdmin  = "admin"
)

// ErrNoWorker is returned for a URL that is not a worker of the pool.
var ErrNoWorker = errors.New("comfyui: no such worker in this pool")

// launch starts w's socket and probes. Called with wmu held, after Start.
func (p *Pool) launch(w *worker) {
	p.wg.Add(2)
	go func() { defer p.wg.Done(); w.connectLoop(w.ctx) }()
	go func() { defer p.wg.Done(); w.probeLoop(w.ctx) }()
}

// AddWorker adds a worker to the running pool (source admin). Adding the
// URL of a worker that is draining takes it back into rotation, and one
// marked broken (health.go) is tried again; adding one the pool has is
// otherwise a no-op.
func (p *Pool) AddWorker(wc WorkerConfig) error {
	if wc.Concurrency == 0 {
		wc.Concurrency = 1
	}
	if err := wc.validate(0); err != nil {
		return err
	}
	if err := resolveInputDirs([]WorkerConfig{wc}, p.logger); err != nil {
		return err
	}
	p.wmu.Lock()
	err := p.addLocked(wc, sourceAdmin)
	p.wmu.Unlock()
	p.notify()
	return err
}

// addLocked adds wc unless a worker has its URL (then a draining one is
// taken back). Called with wmu held.
func (p *Pool) addLocked(wc WorkerConfig, source string) error {
	if p.ctx.Err() != nil {
		return errPoolClosed
	}
	for _, w := range p.all() {
		if w.cfg.URL == wc.URL {
			w.mu.Lock()
			if w.broken != "" {
				// The operator vouches for it again: it rejoins at its next answer.
				w.log.Info("broken worker added again; trying it again", zap.String("was", w.broken))
				w.broken, w.brokenDown = "", false
			}
			back := w.draining
			if back {
				took := w.takesJobs()
				w.draining = false
				w.drainedBy = ""
				w.source = source
				p.capacityChanged(w, took)
			}
			w.mu.Unlock()
			if back {
				w.log.Info("worker back in rotation", zap.String("source", source))
				p.reindex(w)
			}
			return nil
		}
	}
	w, err := newWorker(p, p.nextIdx, wc, source)
	if err != nil {
		return err
	}
	p.nextIdx++
	list := append(slices.Clone(p.all()), w)
	p.list.Store(&list)
	p.capacity.Add(int64(wc.Concurrency))
	w.log.Info("worker joined the pool", zap.String("source", source))
	if p.started {
		p.launch(w)
	}
	return nil
}

// RemoveWorker drains the worker with that URL (as configured or added):
// it takes no new job and leaves the pool once its running attempts end.
// A DNS source that still resolves to it adds it back at its next refresh.
func (p *Pool) RemoveWorker(url string) error {
	for _, w := range p.all() {
		if w.cfg.URL == url {
			p.drain(w, sourceAdmin)
			return nil
		}
	}
	return fmt.Errorf("%w: %s", ErrNoWorker, url)
}

// drain takes w out of rotation (by is who removed it: the admin API or a
// DNS source); it is retired at once when idle, else by the release of its
// last attempt.
func (p *Pool) drain(w *worker, by string) {
	w.mu.Lock()
	was := w.draining
	took := w.takesJobs()
	w.draining = true
	w.drainedBy = by
	p.capacityChanged(w, took)
	idle := w.inflight == 0
	w.mu.Unlock()
	if !was {
		w.log.Info("worker draining")
	}
	if idle {
		p.retire(w)
	}
	p.touch(w)
}

// capacityChanged adjusts the pool's capacity after a change of w's
// draining or stopping state; took is whether it took jobs before. Called
// with w.mu held.
func (p *Pool) capacityChanged(w *worker, took bool) {
	switch now := w.takesJobs(); {
	case took && !now:
		p.capacity.Add(-int64(w.cfg.Concurrency))
	case !took && now:
		p.capacity.Add(int64(w.cfg.Concurrency))
	}
}

// retire removes a drained, idle worker from the pool and stops its loops.
func (p *Pool) retire(w *worker) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	w.mu.Lock()
	gone := w.draining && w.inflight == 0
	w.mu.Unlock()
	if !gone {
		return // taken back, or busy again
	}
	p.unions() // the catalog as it was, kept for a pool left at zero
	list := slices.DeleteFunc(slices.Clone(p.all()), func(x *worker) bool { return x == w })
	if len(list) == len(p.all()) {
		return
	}
	p.list.Store(&list)
	w.stop()
	p.unindex(w)
	p.catalogChanged()
	w.log.Info("drained worker left the pool")
}

// syncSource makes the workers of source exactly want: new URLs join,
// URLs no longer wanted drain.
func (p *Pool) syncSource(source string, want []WorkerConfig) {
	p.wmu.Lock()
	wanted := map[string]bool{}
	for _, wc := range want {
		wanted[wc.URL] = true
		if err := p.addLocked(wc, source); err != nil {
			p.logger.Warn("adding a discovered worker", zap.String("url", wc.URL), zap.Error(err))
		}
	}
	var gone []*worker
	for _, w := range p.all() {
		w.mu.Lock()
		if w.source == source && !wanted[w.cfg.URL] && !w.draining {
			gone = append(gone, w)
		}
		w.mu.Unlock()
	}
	p.wmu.Unlock()
	for _, w := range gone {
		p.drain(w, source)
	}
	p.notify()
}

// discover resolves src every src.Refresh until ctx ends. A failed
// resolution keeps the workers it had.
func (p *Pool) discover(ctx context.Context, src DNSConfig) {
	source := "dns:" + src.Name
	log := p.logger.With(zap.String("dns", src.Name))
	resolver := net.DefaultResolver
	if src.Resolver != "" {
		resolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, src.Resolver)
		}}
	}
	first := true
	for {
		rctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		want, err := resolveWorkers(rctx, resolver, src)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			log.Warn("resolving workers; keeping the ones there are", zap.Error(err))
		default:
			p.syncSource(source, want)
		}
		if first && p.pending.Add(-1) == 0 {
			close(p.resolved) // Catalog may now wait for these workers
		}
		first = false
		if !sleepCtx(ctx, jittered(src.Refresh)) {
			return
		}
	}
}

// resolveWorkers turns a DNS source's answer into worker configs, sorted by
// URL. A name that does not exist resolves to no worker.
func resolveWorkers(ctx context.Context, r *net.Resolver, src DNSConfig) ([]WorkerConfig, error) {
	type target struct {
		host string
		port int
	}
	var targets []target
	if strings.HasPrefix(src.Name, "_") {
		_, srvs, err := r.LookupSRV(ctx, "", "", src.Name)
		if err != nil && !isNotFound(err) {
			return nil, err
		}
		for _, s := range srvs {
			targets = append(targets, target{strings.TrimSuffix(s.Target, "."), int(s.Port)})
		}
	} else {
		targets = append(targets, target{src.Name, src.Port})
	}
	var out []WorkerConfig
	for _, t := range targets {
		addrs, err := r.LookupIPAddr(ctx, t.host)
		if err != nil {
			if isNotFound(err) {
				continue
			}
			return nil, err
		}
		for _, a := range addrs {
			out = append(out, WorkerConfig{URL: src.Scheme + "://" + net.JoinHostPort(a.IP.String(), strconv.Itoa(t.port)),
				Headers: src.Headers, Concurrency: src.Concurrency})
		}
	}
	slices.SortFunc(out, func(a, b WorkerConfig) int { return strings.Compare(a.URL, b.URL) })
	return slices.CompactFunc(out, func(a, b WorkerConfig) bool { return a.URL == b.URL }), nil
}

func isNotFound(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de) && de.IsNotFound
}

// equalJitter is a backoff wait between d/2 and d: random enough to spread
// workers that dropped together, and still growing as d doubles.
func equalJitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(randInt64n(int64(d/2)))
}

// Dial pacing: every worker of a pool dials its socket through one token
// bucket of dialRate per second with a burst of dialBurst, so that at most
// dialBurst + dialRate/10 dials leave in any 100 ms (6), whether a hundred
// workers start together or all their sockets dropped at once (they are
// all connected again in about 2.5 s). The margin below the 20 a worker
// host may see in 100 ms covers dials bunched by a stalled network or
// machine on the way.
const (
	dialRate  = 40
	dialBurst = 2
)

// jittered spreads a period over ±20 %, so that many loops started
// together do not stay in step.
func jittered(d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - d/5 + time.Duration(randInt64n(int64(d)*2/5+1))
}

func randInt64n(n int64) int64 { return rand.Int64N(n) }

// The running pools by name, for the admin API (a process may run several
// configurations during a reload; the last one registered wins).
var (
	registryMu sync.Mutex
	registry   = map[string]*Pool{}
)

// Register makes p the running pool called name.
func Register(name string, p *Pool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	registry[name] = p
}

// Unregister forgets p (when it closes).
func Unregister(p *Pool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	for name, q := range registry {
		if q == p {
			delete(registry, name)
		}
	}
}

// Lookup returns the running pool called name.
func Lookup(name string) (*Pool, bool) {
	registryMu.Lock()
	defer registryMu.Unlock()
	p, ok := registry[name]
	return p, ok
}

// Registered lists the names of the running pools.
func Registered() []string {
	registryMu.Lock()
	defer registryMu.Unlock()
	names := make([]string, 0, len(registry))
	for name := range registry {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
