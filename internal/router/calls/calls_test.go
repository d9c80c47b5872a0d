package calls

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/embedded"
)

// fakeAdapter is a handle-bearing partner whose generation finishes after
// `work`; with handle false it answers synchronously after `work`.
type fakeAdapter struct {
	work        time.Duration
	handle      bool
	submissions atomic.Int32
	cancels     atomic.Int32
	mu          sync.Mutex
	started     map[string]time.Time
	cancelled   map[string]bool
	cancelOK    bool
}

var okOutcome = &provider.Outcome{Status: 200, ContentType: "application/json", Body: []byte(`{"images":[{"url":"u"}]}`), Billable: true}

func (f *fakeAdapter) Submit(ctx context.Context, m *catalog.Model, body []byte, _ http.Header) (*provider.Handle, *provider.Outcome, error) {
	f.submissions.Add(1)
	if !f.handle {
		select {
		case <-time.After(f.work):
			return nil, okOutcome, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		}
	}
	id := time.Now().String()
	f.mu.Lock()
	f.started[id] = time.Now()
	f.mu.Unlock()
	return &provider.Handle{Kind: "fake", RequestID: id}, nil, nil
}

func (f *fakeAdapter) Poll(_ context.Context, _ *catalog.Model, h *provider.Handle) (*provider.Outcome, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancelled[h.RequestID] {
		return cancelledOutcome, nil
	}
	if time.Since(f.started[h.RequestID]) < f.work {
		return nil, nil
	}
	return okOutcome, nil
}

// cancelledOutcome is what a cancelled generation's result classifies as
// (fal answers 499 client_cancelled): a failure, not billed.
var cancelledOutcome = provider.Fail(provider.BucketProviderError, http.StatusBadGateway, "cancelled")

// Cancel behaves like fal's: a generation still working is cancelled; one
// already done stays done (ALREADY_COMPLETED), and both answer nil.
func (f *fakeAdapter) Cancel(_ context.Context, _ *catalog.Model, h *provider.Handle) error {
	f.cancels.Add(1)
	if !f.cancelOK {
		return provider.ErrNoCancel
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if time.Since(f.started[h.RequestID]) < f.work {
		f.cancelled[h.RequestID] = true
	}
	return nil
}

type fixture struct {
	svc   *Service
	lim   *limits.Memory
	store *embedded.Store
	fake  *fakeAdapter
	model *catalog.Model
}

func newFixture(t *testing.T, fake *fakeAdapter, lim limits.Limits) *fixture {
	t.Helper()
	return buildFixture(t, fake, lim, false)
}

// newCreditsFixture is a fixture whose calls reserve and settle credits on
// the store's ledger, as the model_router module wires require_credits.
func newCreditsFixture(t *testing.T, fake *fakeAdapter) *fixture {
	t.Helper()
	return buildFixture(t, fake, limits.Limits{}, true)
}

func buildFixture(t *testing.T, fake *fakeAdapter, lim limits.Limits, credits bool) *fixture {
	t.Helper()
	st, err := embedded.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem, err := limits.NewMemory(time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	fake.started = map[string]time.Time{}
	fake.cancelled = map[string]bool{}
	kind := catalog.AdapterHTTP
	if fake.handle {
		kind = catalog.AdapterFal
	}
	cfg := Config{Limiter: mem, Limits: lim, Store: st, Adapters: map[catalog.Adapter]provider.Adapter{kind: fake}}
	if credits {
		cfg.Credits = st
	}
	svc := New(cfg)
	t.Cleanup(func() { svc.Wait(); svc.Close(); mem.Close(); st.Close() })
	m := &catalog.Model{ID: "p/m", Adapter: kind, PriceCents: 5, Deadline: 300 * time.Millisecond, PollInterval: 20 * time.Millisecond}
	return &fixture{svc: svc, lim: mem, store: st, fake: fake, model: m}
}

// grant adds credits to the workspace's ledger.
func (f *fixture) grant(t *testing.T, n int64) {
	t.Helper()
	if _, err := f.store.GrantCredits(context.Background(), "ws", n, ""); err != nil {
		t.Fatal(err)
	}
}

// balance is the workspace's ledger balance, checked against the sum of its
// entries.
func (f *fixture) balance(t *testing.T) int64 {
	t.Helper()
	ctx := context.Background()
	bal, err := f.store.CreditBalance(ctx, "ws")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := f.store.CreditLedger(ctx, "ws", time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, e := range entries {
		sum += e.Amount
	}
	if sum != bal {
		t.Fatalf("balance %d, entries sum to %d", bal, sum)
	}
	return bal
}

var reqSeq atomic.Int64

func (f *fixture) req(key, fp string) Request {
	return Request{RequestID: "req-" + strconv.FormatInt(reqSeq.Add(1), 10),
		Workspace: "ws", Model: f.model, Body: []byte(`{}`), IdempotencyKey: key, Fingerprint: fp}
}

func wantErr(t *testing.T, err error, status int, bucket string) *apierr.Error {
	t.Helper()
	e, ok := apierr.As(err)
	if !ok || e.Status != status || e.Code != bucket {
		t.Fatalf("err = %v, want %d %s", err, status, bucket)
	}
	return e
}

func TestReplayIsNotChargedTwice(t *testing.T) {
	f := newCreditsFixture(t, &fakeAdapter{work: time.Millisecond})
	ctx := context.Background()
	f.grant(t, 20)
	r1, err := f.svc.Call(ctx, f.req("k1", "fp"))
	if err != nil || r1.Status != 200 || r1.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %+v %v", r1, err)
	}
	r2, err := f.svc.Call(ctx, f.req("k1", "fp"))
	if err != nil || r2.Header.Get("Idempotent-Replayed") != "true" || string(r2.Body) != string(r1.Body) {
		t.Fatalf("replay: %+v %v", r2, err)
	}
	f.svc.Wait()
	if bal := f.balance(t); bal != 15 {
		t.Errorf("balance %d, want 15 (one charge of 5)", bal)
	}
	if n := f.fake.submissions.Load(); n != 1 {
		t.Errorf("%d submissions, want 1", n)
	}
	_, err = f.svc.Call(ctx, f.req("k1", "other"))
	wantErr(t, err, 409, BucketInvalidInput)
}

func TestRefusalReleasesKey(t *testing.T) {
	f := newCreditsFixture(t, &fakeAdapter{work: time.Millisecond})
	ctx := context.Background()
	_, err := f.svc.Call(ctx, f.req("k2", "fp"))
	wantErr(t, err, 402, BucketInsufficient)
	f.grant(t, 5)
	r, err := f.svc.Call(ctx, f.req("k2", "fp"))
	if err != nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("after the refusal: %+v %v", r, err)
	}
}

func TestDeadlineWithHandleIsCollected(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: 700 * time.Millisecond, handle: true}, limits.Limits{MaxInFlight: 1})
	ctx := context.Background()
	_, err := f.svc.Call(ctx, f.req("k3", "fp"))
	e := wantErr(t, err, 504, BucketDeadline)
	if e.RetryAfter != 1 {
		t.Errorf("Retry-After %d, want 1", e.RetryAfter)
	}
	// The generation still holds the workspace's only slot.
	_, err = f.svc.Call(ctx, f.req("", ""))
	wantErr(t, err, 429, BucketConcurrency)
	var r *Response
	for range 10 {
		if r, err = f.svc.Call(ctx, f.req("k3", "fp")); err == nil {
			break
		}
		wantErr(t, err, 504, BucketDeadline)
	}
	if r == nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("collect: %+v %v", r, err)
	}
	if n := f.fake.submissions.Load(); n != 1 {
		t.Errorf("%d submissions, want 1", n)
	}
	f.svc.Wait()
	if n, cents, _ := f.lim.Inspect(ctx, "ws"); n != 0 || cents != 0 {
		t.Errorf("after collection: %d in flight, %d cents", n, cents)
	}
}

func TestDeadlineWithoutKeyCancels(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Hour, handle: true, cancelOK: true}, limits.Limits{})
	_, err := f.svc.Call(context.Background(), f.req("", ""))
	if e := wantErr(t, err, 504, BucketDeadline); e.RetryAfter != 0 {
		t.Errorf("keyless 504 has Retry-After %d", e.RetryAfter)
	}
	f.svc.Wait()
	if f.fake.cancels.Load() != 1 {
		t.Errorf("generation not cancelled")
	}
}

// TestDeadlineBeforeAcceptanceReleasesKey: a call whose deadline passed
// before the partner gave anything to collect (every call of a partner
// without handles) answers 504 without Retry-After and frees its key: the
// same-key retry runs the call again (it answered 409 invalid_input, "use a
// new key", against the contract's 504 rules).
func TestDeadlineBeforeAcceptanceReleasesKey(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Hour}, limits.Limits{})
	for i := range 2 {
		_, err := f.svc.Call(context.Background(), f.req("k4", "fp"))
		if e := wantErr(t, err, 504, BucketDeadline); e.RetryAfter != 0 {
			t.Errorf("call %d: a 504 with nothing to collect has Retry-After %d", i, e.RetryAfter)
		}
	}
	if n := f.fake.submissions.Load(); n != 2 {
		t.Errorf("%d submissions, want 2: the retry runs the call again", n)
	}
	_, err := f.svc.Call(context.Background(), f.req("k4", "other"))
	wantErr(t, err, 504, BucketDeadline) // a released key is a fresh key
}

func TestClientDisconnectIsRecordedAndCharged(t *testing.T) {
	f := newCreditsFixture(t, &fakeAdapter{work: 100 * time.Millisecond})
	f.grant(t, 10)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req := f.req("k5", "fp")
	_, err := f.svc.Call(ctx, req)
	wantErr(t, err, 499, BucketClientDisconnected)
	f.svc.Wait()
	rec, err := f.store.GetRouterCall(context.Background(), req.RequestID)
	if err != nil || rec.Bucket != BucketClientDisconnected || rec.ChargedCents != 5 || rec.State != storage.RouterAnswered {
		t.Errorf("record %+v %v", rec, err)
	}
	if bal := f.balance(t); bal != 5 {
		t.Errorf("balance %d, want 5: the completed generation is charged", bal)
	}
	// The recorded answer is still collectable with the same key.
	r, err := f.svc.Call(context.Background(), f.req("k5", "fp"))
	if err != nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay after disconnect: %+v %v", r, err)
	}
}

// TestClientGoneBeforeTheDeadline: a caller that leaves before a partner
// that never answers reaches the deadline is recorded client_disconnected
// (it was recorded deadline_exceeded, which it never saw).
func TestClientGoneBeforeTheDeadline(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Hour}, limits.Limits{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	req := f.req("k6", "fp")
	_, _ = f.svc.Call(ctx, req)
	f.svc.Wait()
	rec, err := f.store.GetRouterCall(context.Background(), req.RequestID)
	if err != nil || rec.Bucket != BucketClientDisconnected || rec.HTTPStatus != 499 || rec.State != storage.RouterConsumed {
		t.Errorf("record %+v %v; want consumed, client_disconnected 499", rec, err)
	}
}

func TestUnavailableLimiterFailsClosed(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: time.Millisecond}, limits.Limits{})
	f.lim.Close()
	_, err := f.svc.Call(context.Background(), f.req("", ""))
	e := wantErr(t, err, 503, BucketServiceUnavailable)
	if !errors.Is(e, limits.ErrUnavailable) {
		t.Errorf("cause %v does not wrap ErrUnavailable", e.Cause)
	}
	if f.fake.submissions.Load() != 0 {
		t.Error("dispatched without admission")
	}
}

// TestTakeoverWhenFollowerDied: a collecting record nobody touches any more
// (its gateway died) is collected by the same-key retry itself, from the
// stored handle, without a new submission.
func TestTakeoverWhenFollowerDied(t *testing.T) {
	f := newFixture(t, &fakeAdapter{work: 50 * time.Millisecond, handle: true}, limits.Limits{})
	f.svc.cfg.TakeoverAfter = 50 * time.Millisecond
	ctx := context.Background()
	orphan := f.req("k6", "fp")
	rec := storage.RouterCall{RequestID: orphan.RequestID, WorkspaceID: "ws", ModelID: "p/m", ReservedCents: 5,
		IdempotencyKey: "k6", Fingerprint: "fp"}
	if _, err := f.store.CreateRouterCall(ctx, rec, storage.RouterIdempotencyTTL); err != nil {
		t.Fatal(err)
	}
	f.fake.mu.Lock()
	f.fake.started["h-orphan"] = time.Now()
	f.fake.mu.Unlock()
	rec.ProviderHandle = []byte(`{"kind":"fake","request_id":"h-orphan"}`)
	if err := f.store.UpdateRouterCall(ctx, collectingRecord(rec)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	r, err := f.svc.Call(ctx, f.req("k6", "fp"))
	if err != nil || r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("takeover: %+v %v", r, err)
	}
	if n := f.fake.submissions.Load(); n != 0 {
		t.Errorf("%d submissions, want 0", n)
	}
	got, err := f.store.GetRouterCall(ctx, orphan.RequestID)
	if err != nil || got.State != storage.RouterAnswered || got.ChargedCents != 5 {
		t.Errorf("record after takeover %+v %v", got, err)
	}
}
