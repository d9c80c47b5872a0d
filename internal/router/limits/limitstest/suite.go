// Package limitstest is the behaviour suite every limits.Limiter must pass.
// The Redis and Memory implementations run the same table, so their
// semantics cannot drift apart.
package limitstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/router/limits"
)

// Harness is one fresh limiter for one subtest.
type Harness struct {
	Limiter limits.Limiter
	// TTL is the limiter's lease TTL; keep it short (about 1.5 s) so the
	// expiry cases stay quick against a real clock.
	TTL time.Duration
	// Advance lets d pass: a real sleep for Redis (server clock), a step of
	// the injected clock for Memory.
	Advance func(d time.Duration)
}

// Factory builds a Harness isolated from every other (own key prefix or own
// instance) and registers its cleanup on t.
type Factory func(t *testing.T) Harness

// Clock is a goroutine-safe fake clock for limits.NewMemory.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock starts a clock at a fixed instant.
func NewClock() *Clock {
	return &Clock{now: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// env is what a case gets: the harness, a workspace of its own and helpers.
type env struct {
	Harness
	t   *testing.T
	ctx context.Context
	ws  string
}

func (e *env) admit(id string, cents int64, lim limits.Limits) *limits.Lease {
	e.t.Helper()
	l, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: id, Cents: cents}, lim)
	if err != nil {
		e.t.Fatalf("admit %s (%d cents): %v", id, cents, err)
	}
	if l.ID != id || l.Workspace != e.ws || l.Cents != cents {
		e.t.Fatalf("admit %s: lease %+v does not describe the call", id, l)
	}
	return l
}

func (e *env) refuse(id string, cents int64, lim limits.Limits, want limits.Refusal) *limits.Refusal {
	e.t.Helper()
	l, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: id, Cents: cents}, lim)
	if err == nil {
		e.t.Fatalf("admit %s (%d cents) = lease %+v, want refusal %+v", id, cents, l, want)
	}
	var ref *limits.Refusal
	if !errors.As(err, &ref) {
		e.t.Fatalf("admit %s: error %v, want *Refusal", id, err)
	}
	got := *ref
	got.RetryAfter = 0 // checked by the caller when it matters
	if got != want {
		e.t.Fatalf("admit %s: refusal %+v, want %+v", id, got, want)
	}
	return ref
}

func (e *env) settle(l *limits.Lease) {
	e.t.Helper()
	if err := l.Settle(context.WithoutCancel(e.ctx)); err != nil {
		e.t.Fatalf("settle %s: %v", l.ID, err)
	}
}

func (e *env) inspect(wantCount int, wantCents int64) {
	e.t.Helper()
	n, c, err := e.Limiter.Inspect(e.ctx, e.ws)
	if err != nil {
		e.t.Fatalf("inspect: %v", err)
	}
	if n != wantCount || c != wantCents {
		e.t.Fatalf("inspect = %d calls, %d cents; want %d, %d", n, c, wantCount, wantCents)
	}
}

// eventually polls cond, letting 50 ms pass between tries, for up to 10 s of
// harness time. It asserts only that cond becomes true, never how fast.
func (e *env) eventually(what string, cond func() bool) {
	e.t.Helper()
	for range 200 {
		if cond() {
			return
		}
		e.Advance(50 * time.Millisecond)
	}
	e.t.Fatalf("%s: not true after 10 s", what)
}

func randomWorkspace(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "ws-" + hex.EncodeToString(b)
}

// Run runs every case against limiters from newHarness, in parallel.
func Run(t *testing.T, newHarness Factory) {
	cases := make([]testCase, 0, len(admissionCases)+len(leaseCases)+1)
	cases = append(cases, admissionCases...)
	cases = append(cases, leaseCases...)
	cases = append(cases, testCase{"Concurrency200", concurrency})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t)
			tc.run(&env{Harness: h, t: t, ctx: context.Background(), ws: randomWorkspace(t)})
		})
	}
}
