package calls

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/storage"
)

// waitFor polls cond until it holds or fails the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// orphan writes a keyed record as a gateway that died would have left it.
func (f *fixture) orphan(t *testing.T, key, state string, handle []byte) storage.RouterCall {
	t.Helper()
	ctx := context.Background()
	rec := storage.RouterCall{RequestID: f.req(key, "fp").RequestID, WorkspaceID: "ws", ModelID: "p/m", ReservedCents: 5,
		State: storage.RouterRunning, IdempotencyKey: key, Fingerprint: "fp"}
	if _, err := f.store.CreateRouterCall(ctx, rec, storage.RouterIdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	rec.ProviderHandle = handle
	rec.State = state
	if err := f.store.UpdateRouterCall(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if f.svc.cfg.Credits != nil {
		// The dead gateway had reserved the call's credits.
		if err := f.store.ReserveCallCredits(ctx, "ws", rec.RequestID, 5); err != nil {
			t.Fatal(err)
		}
	}
	return rec
}

// TestKeyedCallStoresHandleWhileRunning: the handle is stored as soon as the
// partner accepts, in a valid running record (the record was once written
// with an empty state, which the schema refuses).
func TestKeyedCallStoresHandleWhileRunning(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: 200 * time.Millisecond, handle: true}, limits.Limits{})
	req := f.req("h1", "fp")
	done := make(chan error, 1)
	go func() {
		_, err := f.svc.Call(context.Background(), req)
		done <- err
	}()
	var rec storage.RouterCall
	waitFor(t, 5*time.Second, "the stored handle", func() bool {
		var err error
		rec, err = f.store.GetRouterCall(context.Background(), req.RequestID)
		return (err == nil && len(rec.ProviderHandle) > 0) || rec.State == storage.RouterAnswered
	})
	if rec.State != storage.RouterRunning || len(rec.ProviderHandle) == 0 {
		t.Errorf("record while the partner works: state %q, handle %q; want running with the handle", rec.State, rec.ProviderHandle)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestStaleRunningRecord: a running record whose gateway died is taken over
// when it holds a handle, answers 409 concurrency while it may still be
// dispatching without one, and is consumed once its deadline has passed.
func TestStaleRunningRecord(t *testing.T) {
	f := newCreditsFixture(t, &fakeAdapter{work: 30 * time.Millisecond, handle: true})
	f.svc.cfg.TakeoverAfter = 50 * time.Millisecond
	// The handle-less record must still be within its deadline when the
	// first retry of it arrives, after the takeover below: a deadline
	// well above that work keeps a loaded machine from passing it first.
	f.model.Deadline = 1500 * time.Millisecond
	ctx := context.Background()
	f.grant(t, 20)
	f.fake.mu.Lock()
	f.fake.started["h-run"] = time.Now()
	f.fake.mu.Unlock()
	withHandle := f.orphan(t, "run-h", storage.RouterRunning, []byte(`{"kind":"fake","request_id":"h-run"}`))
	without := f.orphan(t, "run-0", storage.RouterRunning, nil)
	fresh := f.orphan(t, "run-f", storage.RouterRunning, []byte(`{"kind":"fake","request_id":"h-run"}`))
	time.Sleep(100 * time.Millisecond)
	if _, err := f.store.TouchRouterCall(ctx, fresh.RequestID); err != nil {
		t.Fatal(err)
	}

	_, err := f.svc.Call(ctx, f.req("run-f", "fp"))
	wantErr(t, err, http.StatusConflict, BucketConcurrency)

	r, err := f.svc.Call(ctx, f.req("run-h", "fp"))
	if err != nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("takeover of a running record: %+v %v", r, err)
	}
	f.svc.Wait()
	got, _ := f.store.GetRouterCall(ctx, withHandle.RequestID)
	if got.State != storage.RouterAnswered || got.ChargedCents != 5 {
		t.Errorf("taken-over record %+v: want answered, charged 5", got)
	}
	// 20 - 5 charged by the takeover - 5 each still reserved by run-0 and run-f.
	if bal := f.balance(t); bal != 5 {
		t.Errorf("balance %d after the takeover, want 5: the takeover settles the charge", bal)
	}

	// Without a handle: still within deadline + TakeoverAfter of its creation.
	_, err = f.svc.Call(ctx, f.req("run-0", "fp"))
	wantErr(t, err, http.StatusConflict, BucketConcurrency)
	time.Sleep(f.model.Deadline + f.svc.cfg.TakeoverAfter)
	_, err = f.svc.Call(ctx, f.req("run-0", "fp"))
	wantErr(t, err, http.StatusConflict, BucketInvalidInput)
	got, _ = f.store.GetRouterCall(ctx, without.RequestID)
	if got.State != storage.RouterConsumed {
		t.Errorf("handle-less stale record state %q, want consumed", got.State)
	}
	if bal := f.balance(t); bal != 10 {
		t.Errorf("balance %d after the consumed call, want 10: its reservation refunded", bal)
	}
	if n := f.fake.submissions.Load(); n != 0 {
		t.Errorf("%d submissions, want 0", n)
	}
}

// TestTakeoverDebitIsGuarded: a generation its dead owner already settled
// (debited) is not debited again by the takeover.
func TestTakeoverDebitIsGuarded(t *testing.T) {
	f := newCreditsFixture(t, &fakeAdapter{work: 10 * time.Millisecond, handle: true})
	f.svc.cfg.TakeoverAfter = 50 * time.Millisecond
	ctx := context.Background()
	f.grant(t, 20)
	f.fake.mu.Lock()
	f.fake.started["h-g"] = time.Now()
	f.fake.mu.Unlock()
	rec := f.orphan(t, "guard", storage.RouterCollecting, []byte(`{"kind":"fake","request_id":"h-g"}`))
	// The owner settled, then died before writing the answer.
	lease, err := f.lim.Admit(ctx, "ws", limits.Call{ID: rec.RequestID, Cents: 5}, limits.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.store.SettleCallCredits(ctx, rec.RequestID, 5); err != nil || !ok {
		t.Fatalf("the owner's settlement: %v, %v", ok, err)
	}
	time.Sleep(100 * time.Millisecond)
	r, err := f.svc.Call(ctx, f.req("guard", "fp"))
	if err != nil || r.Status != 200 {
		t.Fatalf("takeover: %+v %v", r, err)
	}
	f.svc.Wait()
	if bal := f.balance(t); bal != 15 {
		t.Errorf("balance %d, want 15: one debit", bal)
	}
}

// TestKeylessDeadlineCompletedBeforeCancelIsCharged: the generation
// completed before the cancel landed (fal's ALREADY_COMPLETED): it is billed
// by the partner, so the router fetches it and charges it.
func TestKeylessDeadlineCompletedBeforeCancelIsCharged(t *testing.T) {
	for _, c := range []struct {
		name    string
		work    time.Duration
		charged int64
		state   string
	}{
		{"completed before the cancel", 50 * time.Millisecond, 5, storage.RouterAnswered},
		{"cancelled while working", time.Hour, 0, storage.RouterAnswered},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newCreditsFixture(t, &fakeAdapter{work: c.work, handle: true, cancelOK: true})
			// The first poll comes after the deadline: only the cancel sees the outcome.
			f.model.PollInterval = 500 * time.Millisecond
			ctx := context.Background()
			f.grant(t, 20)
			req := f.req("", "")
			_, err := f.svc.Call(ctx, req)
			wantErr(t, err, http.StatusGatewayTimeout, BucketDeadline)
			f.svc.Wait()
			f.svc.rec.close()
			rec, err := f.store.GetRouterCall(ctx, req.RequestID)
			if err != nil || rec.ChargedCents != c.charged || rec.State != c.state {
				t.Errorf("record %+v (%v): want %s, charged %d", rec, err, c.state, c.charged)
			}
			if bal := f.balance(t); bal != 20-c.charged {
				t.Errorf("balance %d, want %d", bal, 20-c.charged)
			}
			if f.fake.cancels.Load() != 1 {
				t.Errorf("%d cancels, want 1", f.fake.cancels.Load())
			}
		})
	}
}

// TestFollowerTouchesOnItsOwnTicker: the follower keeps its record fresh
// between polls (a poll interval longer than TakeoverAfter must not let a
// retry take over a live follower), and never reopens a record that another
// owner answered meanwhile.
func TestFollowerTouchesOnItsOwnTicker(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Hour, handle: true}, limits.Limits{})
	f.svc.cfg.TakeoverAfter = 90 * time.Millisecond
	// No poll happens during the test: every touch comes from the ticker.
	f.model.PollInterval = time.Hour
	ctx := context.Background()
	req := f.req("touch", "fp")
	_, err := f.svc.Call(ctx, req)
	wantErr(t, err, http.StatusGatewayTimeout, BucketDeadline)
	first, err := f.store.GetRouterCall(ctx, req.RequestID)
	if err != nil || first.State != storage.RouterCollecting {
		t.Fatalf("record %+v %v, want collecting", first, err)
	}
	waitFor(t, 5*time.Second, "a touch between polls", func() bool {
		rec, err := f.store.GetRouterCall(ctx, req.RequestID)
		return err == nil && rec.UpdatedAt.After(first.UpdatedAt)
	})
	// Another owner answers the record; the follower's touches must not
	// move it back to collecting.
	answered := first
	answered.State, answered.HTTPStatus = storage.RouterAnswered, 200
	if err := f.store.UpdateRouterCall(ctx, answered); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * f.svc.cfg.TakeoverAfter)
	if rec, _ := f.store.GetRouterCall(ctx, req.RequestID); rec.State != storage.RouterAnswered {
		t.Errorf("record reopened to %q by the follower", rec.State)
	}
	f.svc.Close() // ends the follower, which would otherwise poll for an hour
}

// TestCloseStopsFollowers: Close ends background followers (bounded) and
// leaves a keyed generation collectable by a same-key retry elsewhere.
func TestCloseStopsFollowers(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Hour, handle: true}, limits.Limits{MaxInFlight: 1})
	ctx := context.Background()
	req := f.req("close", "fp")
	_, err := f.svc.Call(ctx, req)
	wantErr(t, err, http.StatusGatewayTimeout, BucketDeadline)
	closed := make(chan struct{})
	go func() {
		f.svc.Close()
		f.svc.Wait()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not stop the follower")
	}
	rec, err := f.store.GetRouterCall(ctx, req.RequestID)
	if err != nil || rec.State != storage.RouterCollecting || len(rec.ProviderHandle) == 0 {
		t.Errorf("record after Close %+v %v: want collecting with its handle", rec, err)
	}
	if n, _, _ := f.lim.Inspect(ctx, "ws"); n != 0 {
		t.Errorf("%d leases after Close, want 0 (settled)", n)
	}
}

// budgetAdapter fails every submission for lack of response memory.
type budgetAdapter struct{ fakeAdapter }

func (b *budgetAdapter) Submit(context.Context, *catalog.Model, []byte, http.Header) (*provider.Handle, *provider.Outcome, error) {
	return nil, nil, errors.Join(errors.New("read"), provider.ErrResponseBudget)
}

func TestResponseBudgetIsServiceUnavailable(t *testing.T) {
	f := newFixture(t, &fakeAdapter{}, limits.Limits{})
	f.svc.cfg.Adapters[catalog.AdapterHTTP] = &budgetAdapter{}
	_, err := f.svc.Call(context.Background(), f.req("b1", "fp"))
	wantErr(t, err, http.StatusServiceUnavailable, BucketServiceUnavailable)
	if n, _, _ := f.lim.Inspect(context.Background(), "ws"); n != 0 {
		t.Errorf("%d leases left", n)
	}
}
