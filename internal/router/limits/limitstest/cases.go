package limitstest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/internal/router/limits"
)

type testCase = struct {
	name string
	run  func(e *env)
}

// admissionCases check what is admitted and what each refusal carries.
var admissionCases = []testCase{
	{"ZeroLimitsAdmitEverything", func(e *env) {
		var total int64
		for i := range 30 {
			e.admit(fmt.Sprint("c", i), int64(i), limits.Limits{})
			total += int64(i)
		}
		e.inspect(30, total)
	}},
	{"InFlightCap", func(e *env) {
		lim := limits.Limits{MaxInFlight: 2}
		a := e.admit("a", 10, lim)
		b := e.admit("b", 10, lim)
		if b.InFlight != 2 || b.CommittedCents != 20 {
			e.t.Fatalf("second lease totals %d calls %d cents, want 2, 20", b.InFlight, b.CommittedCents)
		}
		e.refuse("c", 10, lim, limits.Refusal{Reason: limits.ReasonInFlight, Limit: 2, Current: 2})
		e.settle(a)
		c := e.admit("c", 10, lim)
		e.inspect(2, 20)
		e.settle(b)
		e.settle(c)
		e.inspect(0, 0)
	}},
	{"SpendCeilingHeaders", func(e *env) {
		lim := limits.Limits{SpendCeilingCents: 100}
		e.admit("a", 60, lim)
		// Current excludes the refused call; Remaining stays positive when
		// the call costs more than what is left.
		ref := e.refuse("b", 50, lim, limits.Refusal{Reason: limits.ReasonSpend, Limit: 100, Current: 60, Remaining: 40})
		h := ref.SpendHeaders()
		for k, want := range map[string]string{
			"X-Committed-Spend-Limit": "100", "X-Committed-Spend-Current": "60", "X-Committed-Spend-Remaining": "40",
		} {
			if got := h.Get(k); got != want {
				e.t.Errorf("%s = %q, want %q", k, got, want)
			}
		}
		e.admit("c", 40, lim) // exactly at the ceiling is allowed
		e.refuse("d", 1, lim, limits.Refusal{Reason: limits.ReasonSpend, Limit: 100, Current: 100, Remaining: 0})
		e.admit("free", 0, lim) // a free call fits even at the ceiling
		e.inspect(3, 100)
	}},
	{"CallAboveCeilingAlone", func(e *env) {
		lim := limits.Limits{SpendCeilingCents: 100}
		e.refuse("a", 101, lim, limits.Refusal{Reason: limits.ReasonSpend, Limit: 100, Current: 0, Remaining: 100})
		e.inspect(0, 0)
	}},
	{"InFlightCheckedBeforeSpend", func(e *env) {
		lim := limits.Limits{MaxInFlight: 1, SpendCeilingCents: 10}
		e.admit("a", 10, lim)
		ref := e.refuse("b", 10, lim, limits.Refusal{Reason: limits.ReasonInFlight, Limit: 1, Current: 1})
		if ref.SpendHeaders() != nil {
			e.t.Fatalf("in-flight refusal carries spend headers %v", ref.SpendHeaders())
		}
	}},
	{"RateWindowRetryAfter", func(e *env) {
		const period = 1200 * time.Millisecond
		lim := limits.Limits{Rate: []limits.Window{{Name: "short", Period: period, Max: 2}}}
		e.settle(e.admit("a", 1, lim))
		e.settle(e.admit("b", 1, lim))
		ref := e.refuse("c", 1, lim, limits.Refusal{Reason: limits.ReasonRate, Limit: 2, Current: 2, Window: "short"})
		if ref.RetryAfter <= 0 || ref.RetryAfter > period {
			e.t.Fatalf("RetryAfter %v outside (0, %v]", ref.RetryAfter, period)
		}
		if s := ref.RetryAfterSeconds(); s != 1 && s != 2 {
			e.t.Fatalf("RetryAfterSeconds %d, want 1 or 2 for %v", s, ref.RetryAfter)
		}
		e.Advance(ref.RetryAfter)
		e.eventually("admitted once the window frees", func() bool {
			l, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: "c", Cents: 1}, lim)
			if err == nil {
				e.settle(l)
				return true
			}
			var r *limits.Refusal
			if !errors.As(err, &r) || r.Reason != limits.ReasonRate {
				e.t.Fatalf("admit c: %v, want a rate refusal or success", err)
			}
			return false
		})
	}},
	{"RefusalConsumesNothing", func(e *env) {
		lim := limits.Limits{MaxInFlight: 1, Rate: []limits.Window{
			{Name: "minute", Period: time.Minute, Max: 2},
			{Name: "hour", Period: time.Hour, Max: 100},
		}}
		a := e.admit("a", 5, lim)
		e.refuse("b", 5, lim, limits.Refusal{Reason: limits.ReasonInFlight, Limit: 1, Current: 1})
		e.settle(a)
		e.settle(e.admit("c", 5, lim)) // the refused b took no rate unit
		ref := e.refuse("d", 5, lim, limits.Refusal{Reason: limits.ReasonRate, Limit: 2, Current: 2, Window: "minute"})
		if ref.RetryAfter <= 0 || ref.RetryAfter > time.Minute {
			e.t.Fatalf("RetryAfter %v outside (0, 1m]", ref.RetryAfter)
		}
		e.inspect(0, 0)
	}},
	{"DuplicateCallID", func(e *env) {
		e.admit("a", 7, limits.Limits{})
		_, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: "a", Cents: 7}, limits.Limits{})
		if !errors.Is(err, limits.ErrDuplicateCall) {
			e.t.Fatalf("second admit of a: %v, want ErrDuplicateCall", err)
		}
		e.inspect(1, 7)
	}},
	{"DuplicateCallIDWhenFull", func(e *env) {
		// The duplicate is reported even when a limit would refuse it.
		lim := limits.Limits{MaxInFlight: 1}
		e.admit("a", 7, lim)
		_, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: "a", Cents: 7}, lim)
		if !errors.Is(err, limits.ErrDuplicateCall) {
			e.t.Fatalf("second admit of a: %v, want ErrDuplicateCall", err)
		}
		e.inspect(1, 7)
	}},
	{"WorkspacesIsolated", func(e *env) {
		lim := limits.Limits{MaxInFlight: 1, SpendCeilingCents: 10}
		e.admit("a", 10, lim)
		e.refuse("b", 1, lim, limits.Refusal{Reason: limits.ReasonInFlight, Limit: 1, Current: 1})
		other := *e
		other.ws = e.ws + "-other"
		other.admit("a", 10, lim) // same call id, other workspace
		other.inspect(1, 10)
		e.inspect(1, 10)
	}},
	{"InvalidArguments", func(e *env) {
		for name, tc := range map[string]struct {
			ws   string
			call limits.Call
			lim  limits.Limits
		}{
			"empty workspace":    {"", limits.Call{ID: "a"}, limits.Limits{}},
			"empty call id":      {e.ws, limits.Call{}, limits.Limits{}},
			"negative cents":     {e.ws, limits.Call{ID: "a", Cents: -1}, limits.Limits{}},
			"huge cents":         {e.ws, limits.Call{ID: "a", Cents: limits.MaxCents + 1}, limits.Limits{}},
			"negative in-flight": {e.ws, limits.Call{ID: "a"}, limits.Limits{MaxInFlight: -1}},
			"bad window name":    {e.ws, limits.Call{ID: "a"}, limits.Limits{Rate: []limits.Window{{Name: "a b", Period: time.Second, Max: 1}}}},
			"duplicate window": {e.ws, limits.Call{ID: "a"}, limits.Limits{Rate: []limits.Window{
				{Name: "m", Period: time.Second, Max: 1}, {Name: "m", Period: time.Minute, Max: 1}}}},
			"zero window max": {e.ws, limits.Call{ID: "a"}, limits.Limits{Rate: []limits.Window{{Name: "m", Period: time.Second}}}},
		} {
			if _, err := e.Limiter.Admit(e.ctx, tc.ws, tc.call, tc.lim); !errors.Is(err, limits.ErrInvalid) {
				e.t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		e.inspect(0, 0)
	}},
}

// leaseCases check expiry, heartbeats and settlement.
var leaseCases = []testCase{
	{"SettleIdempotentAndDetached", func(e *env) {
		reqCtx, cancel := context.WithCancel(e.ctx)
		l, err := e.Limiter.Admit(reqCtx, e.ws, limits.Call{ID: "a", Cents: 30}, limits.Limits{MaxInFlight: 1})
		if err != nil {
			e.t.Fatal(err)
		}
		e.inspect(1, 30)
		cancel() // the client went away; release must still happen
		for range 2 {
			if err := l.Settle(context.WithoutCancel(reqCtx)); err != nil {
				e.t.Fatalf("settle on detached context: %v", err)
			}
		}
		e.inspect(0, 0)
		if err := l.Heartbeat(e.ctx); !errors.Is(err, limits.ErrLeaseLost) {
			e.t.Fatalf("heartbeat after settle: %v, want ErrLeaseLost", err)
		}
	}},
	{"HeartbeatKeepsLeaseAlive", func(e *env) {
		l := e.admit("a", 5, limits.Limits{})
		for range 5 { // 5 × TTL/3 outlives the TTL
			e.Advance(e.TTL / 3)
			if err := l.Heartbeat(e.ctx); err != nil {
				e.t.Fatalf("heartbeat: %v", err)
			}
		}
		e.inspect(1, 5)
		e.settle(l)
		e.inspect(0, 0)
	}},
	{"CrashedGatewayLeaseIsReaped", func(e *env) {
		// live keeps heartbeating, so the workspace stays active and only
		// per-lease reaping (not whole-key expiry) can free the crashed slot.
		lim := limits.Limits{MaxInFlight: 2, SpendCeilingCents: 100}
		live := e.admit("live", 40, lim)
		crashed := e.admit("crashed", 50, lim) // never settled: the gateway "died"
		e.refuse("next", 10, lim, limits.Refusal{Reason: limits.ReasonInFlight, Limit: 2, Current: 2})
		for range 4 { // past the crashed lease's TTL, live heartbeating
			e.Advance(e.TTL / 3)
			if err := live.Heartbeat(e.ctx); err != nil {
				e.t.Fatalf("heartbeat live: %v", err)
			}
		}
		var next *limits.Lease
		e.eventually("admitted after the crashed lease expires", func() bool {
			if err := live.Heartbeat(e.ctx); err != nil {
				e.t.Fatalf("heartbeat live: %v", err)
			}
			l, err := e.Limiter.Admit(e.ctx, e.ws, limits.Call{ID: "next", Cents: 10}, lim)
			if err != nil {
				var r *limits.Refusal
				if !errors.As(err, &r) {
					e.t.Fatalf("admit next: %v", err)
				}
				return false
			}
			next = l
			return true
		})
		if next.InFlight != 2 || next.CommittedCents != 50 {
			e.t.Fatalf("after reaping: %d calls %d cents, want 2, 50 (crashed cents must be gone)", next.InFlight, next.CommittedCents)
		}
		if err := crashed.Heartbeat(e.ctx); !errors.Is(err, limits.ErrLeaseLost) {
			e.t.Fatalf("heartbeat of reaped lease: %v, want ErrLeaseLost", err)
		}
		e.settle(crashed) // settling a reaped lease is harmless…
		e.inspect(2, 50)  // …and does not touch the live ones
		e.settle(next)
		e.settle(live)
		e.inspect(0, 0)
	}},
	{"ExpiredLeaseNotCountedBeforeReap", func(e *env) {
		l := e.admit("a", 25, limits.Limits{})
		e.Advance(e.TTL)
		e.eventually("inspect ignores the expired lease", func() bool {
			n, c, err := e.Limiter.Inspect(e.ctx, e.ws)
			if err != nil {
				e.t.Fatalf("inspect: %v", err)
			}
			return n == 0 && c == 0
		})
		if err := l.Heartbeat(e.ctx); !errors.Is(err, limits.ErrLeaseLost) {
			e.t.Fatalf("heartbeat of expired lease: %v, want ErrLeaseLost", err)
		}
	}},
}
