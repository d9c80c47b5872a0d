package limits

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// Memory is the in-process Limiter for the embedded single-instance default.
// It mirrors Redis exactly: leases expire at their expiry (a lease whose
// expiry is at or before now no longer counts and is reaped by the next
// admission or heartbeat) and rate windows are sliding logs. Its state
// dies with the process, which is fine: the leases would have expired.
type Memory struct {
	now func() time.Time
	ttl time.Duration

	mu        sync.Mutex
	ws        map[string]*memWorkspace
	lastSweep time.Time
	closed    bool
}

var _ Limiter = (*Memory)(nil)

type memLease struct {
	expires time.Time
	cents   int64
}

// memWindow is one window's sliding log, as the Redis rate ZSET.
type memWindow struct {
	period time.Duration
	times  []time.Time // admission times, ascending
}

type memWorkspace struct {
	leases map[string]memLease
	rate   map[string]*memWindow // keyed by rateSuffix
}

// NewMemory builds an in-process limiter. now may be nil (time.Now); tests
// pass a fake clock. ttl 0 means DefaultLeaseTTL.
func NewMemory(ttl time.Duration, now func() time.Time) (*Memory, error) {
	ttl, err := normalizeTTL(ttl)
	if err != nil {
		return nil, err
	}
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, ttl: ttl, ws: map[string]*memWorkspace{}}, nil
}

// Close makes further operations fail with ErrUnavailable.
func (m *Memory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	return nil
}

// workspace returns the state of name, creating it; the caller holds m.mu.
func (m *Memory) workspace(name string) *memWorkspace {
	w := m.ws[name]
	if w == nil {
		w = &memWorkspace{leases: map[string]memLease{}, rate: map[string]*memWindow{}}
		m.ws[name] = w
	}
	return w
}

// reap drops expired leases and rate entries, as the Redis
// scripts and key expiries would; the caller holds m.mu.
func (w *memWorkspace) reap(now time.Time) {
	for id, l := range w.leases {
		if !l.expires.After(now) {
			delete(w.leases, id)
		}
	}
	for k, win := range w.rate {
		win.trim(now)
		if len(win.times) == 0 {
			delete(w.rate, k)
		}
	}
}

// forgetIfEmpty drops a workspace that holds nothing, so idle workspaces
// cost no memory; the caller holds m.mu.
func (m *Memory) forgetIfEmpty(name string) {
	w := m.ws[name]
	if w != nil && len(w.leases) == 0 && len(w.rate) == 0 {
		delete(m.ws, name)
	}
}

// sweep reaps every workspace at most once per TTL, so workspaces that are
// never touched again do not keep expired state (Redis expires their keys);
// the caller holds m.mu.
func (m *Memory) sweep(now time.Time) {
	if now.Sub(m.lastSweep) < m.ttl {
		return
	}
	m.lastSweep = now
	for name, w := range m.ws {
		w.reap(now)
		m.forgetIfEmpty(name)
	}
}

// trim drops admissions that left the window: entries at or before
// now-period are out, as in the Redis script.
func (win *memWindow) trim(now time.Time) {
	edge := now.Add(-win.period)
	cut := sort.Search(len(win.times), func(i int) bool { return win.times[i].After(edge) })
	win.times = win.times[cut:]
}

func (m *Memory) errClosed(op string) error {
	return fmt.Errorf("limits: %s: %w: memory limiter closed", op, ErrUnavailable)
}

// Admit implements Limiter.
func (m *Memory) Admit(ctx context.Context, workspace string, call Call, lim Limits) (*Lease, error) {
	if err := validate(workspace, call, lim); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, m.errClosed("admit")
	}
	now := m.now()
	m.sweep(now)
	w := m.workspace(workspace)
	w.reap(now)
	defer m.forgetIfEmpty(workspace)

	if _, dup := w.leases[call.ID]; dup {
		return nil, fmt.Errorf("%w: %s", ErrDuplicateCall, call.ID)
	}
	count := int64(len(w.leases))
	var committed int64
	for _, l := range w.leases {
		committed += l.cents
	}
	if lim.MaxInFlight > 0 && count >= int64(lim.MaxInFlight) {
		return nil, newRefusal(ReasonInFlight, int64(lim.MaxInFlight), count, "", 0)
	}
	if lim.SpendCeilingCents > 0 && committed+call.Cents > lim.SpendCeilingCents {
		return nil, newRefusal(ReasonSpend, lim.SpendCeilingCents, committed, "", 0)
	}
	for _, win := range lim.Rate {
		log := w.rate[rateSuffix(win)]
		if log == nil {
			continue
		}
		if n := len(log.times); n >= win.Max {
			retry := log.times[n-win.Max].Add(win.Period).Sub(now)
			return nil, newRefusal(ReasonRate, int64(win.Max), int64(n), win.Name, retry)
		}
	}

	w.leases[call.ID] = memLease{expires: now.Add(m.ttl), cents: call.Cents}
	for _, win := range lim.Rate {
		k := rateSuffix(win)
		if w.rate[k] == nil {
			w.rate[k] = &memWindow{period: win.Period}
		}
		w.rate[k].times = append(w.rate[k].times, now)
	}
	return &Lease{
		ID: call.ID, Workspace: workspace, Cents: call.Cents,
		InFlight: int(count + 1), CommittedCents: committed + call.Cents, TTL: m.ttl,
		store: m,
	}, nil
}

func (m *Memory) heartbeat(ctx context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.errClosed("heartbeat")
	}
	w := m.ws[l.Workspace]
	if w == nil {
		return fmt.Errorf("%w: call %s expired", ErrLeaseLost, l.ID)
	}
	now := m.now()
	cur, ok := w.leases[l.ID]
	if !ok || !cur.expires.After(now) {
		delete(w.leases, l.ID)
		m.forgetIfEmpty(l.Workspace)
		return fmt.Errorf("%w: call %s expired", ErrLeaseLost, l.ID)
	}
	cur.expires = now.Add(m.ttl)
	w.leases[l.ID] = cur
	return nil
}

func (m *Memory) settle(ctx context.Context, l *Lease) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return m.errClosed("settle")
	}
	now := m.now()
	w := m.workspace(l.Workspace)
	w.reap(now)
	defer m.forgetIfEmpty(l.Workspace)
	delete(w.leases, l.ID)
	return nil
}

// settleOrdered settles at once: there is no round trip to save.
func (m *Memory) settleOrdered(l *Lease, done func(error)) {
	done(m.settle(context.Background(), l))
}

// Inspect implements Limiter.
func (m *Memory) Inspect(ctx context.Context, workspace string) (int, int64, error) {
	if err := validateWorkspace(workspace); err != nil {
		return 0, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0, 0, m.errClosed("inspect")
	}
	w := m.ws[workspace]
	if w == nil {
		return 0, 0, nil
	}
	now := m.now()
	var count int
	var cents int64
	for _, l := range w.leases {
		if l.expires.After(now) {
			count++
			cents += l.cents
		}
	}
	return count, cents, nil
}
