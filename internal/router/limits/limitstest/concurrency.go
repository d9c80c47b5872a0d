package limitstest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/comfygate/comfygate/internal/router/limits"
)

// concurrency runs 200 goroutines admitting and settling against one
// workspace with MaxInFlight 5 and a 100-cent ceiling; each retries until
// admitted once (bounded). Half the calls cost 10 cents, so five
// of them fit under the ceiling and the in-flight cap is reachable; the rest
// cost 45, so the ceiling is reachable too. The observer counts
// from outside: up after Admit returns, down before Settle is called, so its
// view is always a subset of what the limiter holds and can never exceed a
// bound unless the limiter let it. Every refusal is checked for its reason
// and header values, and the counters must drain to zero.
func concurrency(e *env) {
	const (
		workers  = 200
		attempts = 500
		maxIn    = 5
		ceiling  = 100
	)
	lim := limits.Limits{MaxInFlight: maxIn, SpendCeilingCents: ceiling}

	var inFlight, spend, maxInFlight, maxSpend, admitted, refusedIn, refusedSpend atomic.Int64
	raise := func(peak *atomic.Int64, v int64) {
		for {
			old := peak.Load()
			if v <= old || peak.CompareAndSwap(old, v) {
				return
			}
		}
	}

	errs := make(chan error, workers*attempts)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			cents := int64(10)
			if w%2 == 0 {
				cents = 45
			}
			for a := range attempts {
				call := limits.Call{ID: fmt.Sprintf("w%d-a%d", w, a), Cents: cents}
				lease, err := e.Limiter.Admit(e.ctx, e.ws, call, lim)
				if err != nil {
					if err := checkRefusal(err, cents, maxIn, ceiling); err != nil {
						errs <- fmt.Errorf("%s: %w", call.ID, err)
					}
					var r *limits.Refusal
					if errors.As(err, &r) && r.Reason == limits.ReasonInFlight {
						refusedIn.Add(1)
					} else {
						refusedSpend.Add(1)
					}
					time.Sleep(100 * time.Microsecond)
					continue
				}
				admitted.Add(1)
				raise(&maxInFlight, inFlight.Add(1))
				raise(&maxSpend, spend.Add(cents))
				time.Sleep(time.Duration(w%3) * time.Millisecond) // the "provider"
				inFlight.Add(-1)
				spend.Add(-cents)
				if err := lease.Settle(context.WithoutCancel(e.ctx)); err != nil {
					errs <- fmt.Errorf("%s: settle: %w", call.ID, err)
				}
				return
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Error(err)
	}

	if got := maxInFlight.Load(); got > maxIn {
		e.t.Errorf("observed %d calls in flight, limit %d", got, maxIn)
	}
	if got := maxSpend.Load(); got > ceiling {
		e.t.Errorf("observed %d cents committed, ceiling %d", got, ceiling)
	}
	if admitted.Load() == 0 {
		e.t.Errorf("no call was admitted")
	}
	e.t.Logf("admitted %d, refused in-flight %d, refused spend %d; peak %d calls, %d cents",
		admitted.Load(), refusedIn.Load(), refusedSpend.Load(), maxInFlight.Load(), maxSpend.Load())
	e.inspect(0, 0)
}

// checkRefusal verifies that err is a refusal whose numbers are consistent
// with the limits and the refused call, as the 429 headers will show them.
func checkRefusal(err error, cents, maxIn, ceiling int64) error {
	var r *limits.Refusal
	if !errors.As(err, &r) {
		return fmt.Errorf("admit: %w, want a refusal", err)
	}
	switch r.Reason {
	case limits.ReasonInFlight:
		if r.Limit != maxIn || r.Current != maxIn || r.Remaining != 0 {
			return fmt.Errorf("in-flight refusal %+v, want limit=current=%d", r, maxIn)
		}
		if r.SpendHeaders() != nil {
			return errors.New("in-flight refusal carries spend headers")
		}
	case limits.ReasonSpend:
		if r.Limit != ceiling || r.Current < 0 || r.Current > ceiling || r.Current+cents <= ceiling ||
			r.Remaining != max(0, ceiling-r.Current) {
			return fmt.Errorf("spend refusal %+v inconsistent with a %d-cent call under %d", r, cents, ceiling)
		}
		h := r.SpendHeaders()
		if h.Get("X-Committed-Spend-Limit") != strconv.FormatInt(ceiling, 10) ||
			h.Get("X-Committed-Spend-Current") != strconv.FormatInt(r.Current, 10) ||
			h.Get("X-Committed-Spend-Remaining") != strconv.FormatInt(r.Remaining, 10) {
			return fmt.Errorf("spend headers %v disagree with refusal %+v", h, r)
		}
	default:
		return fmt.Errorf("refusal reason %q, want in_flight or spend", r.Reason)
	}
	return nil
}
