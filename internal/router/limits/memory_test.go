package limits_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/limits/limitstest"
)

func TestMemorySuite(t *testing.T) {
	limitstest.Run(t, func(t *testing.T) limitstest.Harness {
		clock := limitstest.NewClock()
		const ttl = 1500 * time.Millisecond
		m, err := limits.NewMemory(ttl, clock.Now)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = m.Close() })
		return limitstest.Harness{Limiter: m, TTL: ttl, Advance: clock.Advance}
	})
}

func TestMemoryClosedIsUnavailable(t *testing.T) {
	m, err := limits.NewMemory(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lease, err := m.Admit(ctx, "ws", limits.Call{ID: "a", Cents: 1}, limits.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Admit(ctx, "ws", limits.Call{ID: "b"}, limits.Limits{}); !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("admit after close: %v, want ErrUnavailable", err)
	}
	if err := lease.Settle(ctx); !errors.Is(err, limits.ErrUnavailable) {
		t.Fatalf("settle after close: %v, want ErrUnavailable", err)
	}
}

func TestMemoryForgetsIdleWorkspaces(t *testing.T) {
	clock := limitstest.NewClock()
	m, err := limits.NewMemory(time.Second, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := limits.Limits{Rate: []limits.Window{{Name: "m", Period: time.Minute, Max: 5}}}
	if _, err := m.Admit(ctx, "ws", limits.Call{ID: "a"}, lim); err != nil {
		t.Fatal(err)
	}
	if n := limits.MemoryWorkspaces(m); n != 1 {
		t.Fatalf("workspaces = %d, want 1", n)
	}
	clock.Advance(time.Minute)
	// An admission elsewhere sweeps ws: its lease and rate entries expired.
	l, err := m.Admit(ctx, "other", limits.Call{ID: "b"}, limits.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if n := limits.MemoryWorkspaces(m); n != 1 {
		t.Fatalf("workspaces after expiry = %d, want 1 (only other)", n)
	}
	if err := l.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if n := limits.MemoryWorkspaces(m); n != 0 {
		t.Fatalf("workspaces after settle = %d, want 0", n)
	}
}

func TestKeepAliveMemory(t *testing.T) {
	// A real clock: KeepAlive ticks on wall time.
	m, err := limits.NewMemory(limits.MinLeaseTTL*3, nil)
	if err != nil {
		t.Fatal(err)
	}
	testKeepAlive(t, m)
}

// testKeepAlive checks that KeepAlive holds a lease past several TTLs and
// that stop ends it; it sleeps 4 TTLs.
func testKeepAlive(t *testing.T, l limits.Limiter) {
	ctx := context.Background()
	lease, err := l.Admit(ctx, "ws-keepalive", limits.Call{ID: "a", Cents: 3}, limits.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	stop := lease.KeepAlive(ctx, func(err error) { t.Errorf("keepalive: %v", err) })
	time.Sleep(4 * lease.TTL)
	stop()
	if n, c, err := l.Inspect(ctx, "ws-keepalive"); err != nil || n != 1 || c != 3 {
		t.Fatalf("inspect after 4 TTLs of keepalive = %d, %d, %v; want 1, 3", n, c, err)
	}
	if err := lease.Settle(context.WithoutCancel(ctx)); err != nil {
		t.Fatal(err)
	}
	if n, _, err := l.Inspect(ctx, "ws-keepalive"); err != nil || n != 0 {
		t.Fatalf("inspect after settle = %d, %v; want 0", n, err)
	}
}
