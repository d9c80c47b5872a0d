package limits_test

import (
	"context"
	"testing"

	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/storage/pgtest"
)

// TestResume: a resumed lease frees the slot its owner left behind (a
// gateway that died mid-call), once, and settling a call its owner settled
// already frees nothing else, on both limiters.
func TestResume(t *testing.T) {
	mem, err := limits.NewMemory(0, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer mem.Close()
	red, err := limits.OpenRedis(pgtest.RedisURL(t), pgtest.KeyPrefix(t), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer red.Close()
	for name, l := range map[string]limits.Limiter{"memory": mem, "redis": red} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			ws := "ws-resume-" + name
			lim := limits.Limits{MaxInFlight: 2, SpendCeilingCents: 20}
			// Settled by its owner, then resumed: the other call keeps its slot.
			lease, err := l.Admit(ctx, ws, limits.Call{ID: "settled", Cents: 5}, lim)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := l.Admit(ctx, ws, limits.Call{ID: "live", Cents: 3}, lim); err != nil {
				t.Fatal(err)
			}
			if err := lease.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			again, err := limits.Resume(l, ws, "settled")
			if err != nil {
				t.Fatal(err)
			}
			if err := again.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			if n, cents, _ := l.Inspect(ctx, ws); n != 1 || cents != 3 {
				t.Fatalf("after resuming a settled call: %d in flight, %d cents; want 1, 3", n, cents)
			}
			// Owner died without settling: the resumed lease frees its slot
			// and its cents, and a second resume changes nothing.
			if _, err := l.Admit(ctx, ws, limits.Call{ID: "orphan", Cents: 7}, lim); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				r, err := limits.Resume(l, ws, "orphan")
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Settle(ctx); err != nil {
					t.Fatal(err)
				}
				if n, cents, _ := l.Inspect(ctx, ws); n != 1 || cents != 3 {
					t.Errorf("after resume settles the orphan: %d in flight, %d cents; want 1, 3", n, cents)
				}
			}
			if _, err := limits.Resume(l, "", "x"); err == nil {
				t.Error("Resume with an empty workspace succeeded")
			}
		})
	}
}
