package limits_test

import (
	"context"
	"testing"

	"github.com/comfygate/comfygate/modules/router/limits"
	"github.com/comfygate/comfygate/storage/pgtest"
)

// TestResume: a resumed lease debits a charge once per call id, under the
// same guard as the original lease's Settle, on both limiters.
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
			if _, err := l.AddCredits(ctx, ws, 100); err != nil {
				t.Fatal(err)
			}
			lim := limits.Limits{RequireCredits: true}
			// Settled by its owner, then resumed: no second debit.
			lease, err := l.Admit(ctx, ws, limits.Call{ID: "settled", Cents: 5}, lim)
			if err != nil {
				t.Fatal(err)
			}
			if err := lease.Settle(ctx, 5); err != nil {
				t.Fatal(err)
			}
			again, err := limits.Resume(l, ws, "settled", true)
			if err != nil {
				t.Fatal(err)
			}
			if err := again.Settle(ctx, 5); err != nil {
				t.Fatal(err)
			}
			// Owner died without settling: the resumed lease debits, once.
			if _, err := l.Admit(ctx, ws, limits.Call{ID: "orphan", Cents: 7}, lim); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				r, err := limits.Resume(l, ws, "orphan", true)
				if err != nil {
					t.Fatal(err)
				}
				if err := r.Settle(ctx, 7); err != nil {
					t.Fatal(err)
				}
			}
			if bal, _ := l.Balance(ctx, ws); bal != 88 {
				t.Errorf("balance %d, want 88 (5 + 7 debited once each)", bal)
			}
			if n, cents, _ := l.Inspect(ctx, ws); n != 0 || cents != 0 {
				t.Errorf("after resume settles: %d in flight, %d cents", n, cents)
			}
			// Without RequireCredits nothing is debited.
			r, _ := limits.Resume(l, ws, "free", false)
			if err := r.Settle(ctx, 9); err != nil {
				t.Fatal(err)
			}
			if bal, _ := l.Balance(ctx, ws); bal != 88 {
				t.Errorf("balance %d after a creditless resume, want 88", bal)
			}
		})
	}
}
