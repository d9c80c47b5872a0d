package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/memclaim"
)

func TestCheckKey(t *testing.T) {
	tests := []struct {
		name string
		key  string
		ok   bool
	}{
		{"empty", "", false},
		{"one char", "a", true},
		{"uuid", "3f8e6c1a-9b2d-4c7e-8f10-2a4b6c8d0e12", true},
		{"max length", strings.Repeat("k", MaxKeyLen), true},
		{"one over max", strings.Repeat("k", MaxKeyLen+1), false},
		{"every visible ascii", "!\"#$%&'()*+,-./0123456789:;<=>?@AZ[\\]^_`az{|}~", true},
		{"space", "a b", false},
		{"leading space", " ab", false},
		{"tab", "a\tb", false},
		{"newline", "a\nb", false},
		{"nul", "a\x00b", false},
		{"del", "a\x7fb", false},
		{"non-ascii utf8", "clé", false},
		{"latin1 byte", "a\xe9", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckKey(tt.key)
			if tt.ok {
				if err != nil {
					t.Fatalf("CheckKey(%q) = %v, want nil", tt.key, err)
				}
				return
			}
			e, ok := apierr.As(err)
			if !ok {
				t.Fatalf("CheckKey(%q) = %v, want an *apierr.Error", tt.key, err)
			}
			if e.Status != http.StatusBadRequest || e.Code != "invalid_request" {
				t.Fatalf("CheckKey(%q) = %d %s, want 400 invalid_request", tt.key, e.Status, e.Code)
			}
		})
	}
}

func TestDefinitive(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"untyped", errors.New("connection reset"), false},
		{"wrapped untyped", fmt.Errorf("submit: %w", context.DeadlineExceeded), false},
		{"400 invalid_request", apierr.InvalidRequest("bad"), true},
		{"401", apierr.Unauthorized(), true},
		{"402 insufficient_credits", apierr.New(http.StatusPaymentRequired, "insufficient_credits", "no"), true},
		{"403", apierr.Forbidden(), true},
		{"404 blob_not_found", apierr.BlobNotFound(), true},
		{"408 request timeout", apierr.New(http.StatusRequestTimeout, "timeout", "slow"), false},
		{"409 hash_mismatch", apierr.HashMismatch("blake3:aa", "blake3:bb"), true},
		{"413", apierr.PayloadTooLarge(10), true},
		{"422 invalid_workflow", apierr.InvalidWorkflow("bad graph"), true},
		{"422 missing_asset", apierr.New(http.StatusUnprocessableEntity, "missing_asset", "x"), true},
		{"422 reuse", apierr.IdempotencyKeyReuse(), false},
		{"wrapped reuse", fmt.Errorf("asset: %w", apierr.IdempotencyKeyReuse()), false},
		{"429 queue_full", apierr.New(http.StatusTooManyRequests, "queue_full", "full").WithRetryAfter(2), true},
		{"wrapped 422", fmt.Errorf("submit: %w", apierr.InvalidWorkflow("bad")), true},
		{"doubly wrapped 429", fmt.Errorf("a: %w", fmt.Errorf("b: %w", apierr.New(429, "rate_limited", "x"))), true},
		{"499 client gone", apierr.New(499, "client_disconnected", "gone"), true},
		{"500 upstream", apierr.Upstream(errors.New("db down")), false},
		{"502", apierr.New(http.StatusBadGateway, "provider_error", "x"), false},
		{"504", apierr.New(http.StatusGatewayTimeout, "deadline_exceeded", "x"), false},
		{"2xx typed", apierr.New(http.StatusOK, "ok", "fine"), false},
		{"3xx typed", apierr.New(http.StatusFound, "moved", "x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Definitive(tt.err); got != tt.want {
				t.Fatalf("Definitive(%v) = %v, want %v", tt.err, got, tt.want)
			}
		})
	}
}

// isFree reports whether key can be claimed now, and releases it again.
func isFree(t *testing.T, st *memclaim.Store, scope, key string) bool {
	t.Helper()
	ok, err := st.Claim(context.Background(), scope, key, time.Minute)
	if err != nil {
		t.Fatalf("probe claim: %v", err)
	}
	if ok {
		if err := st.Release(context.Background(), scope, key); err != nil {
			t.Fatalf("probe release: %v", err)
		}
	}
	return ok
}

func TestClaimReach(t *testing.T) {
	ctx := context.Background()
	st := memclaim.New()
	first := New(st, "acct-1", "key-1", 0)
	if first.Key() != "key-1" {
		t.Fatalf("Key() = %q", first.Key())
	}
	if err := first.Reach(ctx); err != nil {
		t.Fatalf("first Reach: %v", err)
	}
	// A second Reach on the same claim is a no-op, not a reuse refusal.
	if err := first.Reach(ctx); err != nil {
		t.Fatalf("second Reach on the same claim: %v", err)
	}
	// Another request with the same key in the same scope is refused.
	dup := New(st, "acct-1", "key-1", time.Hour)
	err := dup.Reach(ctx)
	e, ok := apierr.As(err)
	if !ok || e.Code != "idempotency_key_reuse" || e.Status != http.StatusUnprocessableEntity {
		t.Fatalf("duplicate Reach = %v, want 422 idempotency_key_reuse", err)
	}
	// The same key in another scope (account) is independent.
	other := New(st, "acct-2", "key-1", time.Hour)
	if err := other.Reach(ctx); err != nil {
		t.Fatalf("Reach in another scope: %v", err)
	}
}

func TestClaimReachConcurrent(t *testing.T) {
	st := memclaim.New()
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = New(st, "acct", "race", time.Hour).Reach(context.Background())
		}()
	}
	wg.Wait()
	winners := 0
	for _, err := range errs {
		if err == nil {
			winners++
		} else if e, ok := apierr.As(err); !ok || e.Code != "idempotency_key_reuse" {
			t.Fatalf("loser got %v, want idempotency_key_reuse", err)
		}
	}
	if winners != 1 {
		t.Fatalf("%d requests claimed the key, want exactly 1", winners)
	}
}

// failingClaims is a ClaimStore whose Claim fails, to check that a storage
// failure is an upstream error rather than a reuse refusal.
type failingClaims struct{ storage.ClaimStore }

func (failingClaims) Claim(context.Context, string, string, time.Duration) (bool, error) {
	return false, errors.New("redis: connection refused")
}

func TestClaimReachStoreFailure(t *testing.T) {
	err := New(failingClaims{}, "acct", "k", time.Hour).Reach(context.Background())
	e, ok := apierr.As(err)
	if !ok || e.Status != http.StatusInternalServerError || e.Code != "upstream_error" {
		t.Fatalf("Reach with failing store = %v, want 500 upstream_error", err)
	}
	if strings.Contains(e.Message, "redis") {
		t.Fatalf("message leaks the cause: %q", e.Message)
	}
}

func TestClaimSettle(t *testing.T) {
	tests := []struct {
		name     string
		reach    bool
		outcome  error
		released bool
	}{
		{"success keeps", true, nil, false},
		{"validation releases", true, apierr.InvalidWorkflow("bad"), true},
		{"missing asset releases", true, apierr.New(422, "missing_asset", "x"), true},
		{"queue full releases", true, apierr.New(429, "queue_full", "x").WithRetryAfter(2), true},
		{"402 releases", true, apierr.New(402, "insufficient_credits", "x"), true},
		{"wrapped validation releases", true, fmt.Errorf("w: %w", apierr.Validation("x")), true},
		{"upstream keeps", true, apierr.Upstream(errors.New("timeout")), false},
		{"untyped keeps", true, errors.New("maybe committed"), false},
		{"upstream never sent releases", true, apierr.Upstream(fmt.Errorf("create job: %w", notSentErr{true})), true},
		{"publish failed before the commit releases", true, apierr.Upstream(fmt.Errorf("create asset: %w: %w", storage.ErrNotCommitted, errors.New("s3 timeout"))), true},
		{"upstream maybe sent keeps", true, apierr.Upstream(fmt.Errorf("create job: %w", notSentErr{false})), false},
		{"reuse keeps", true, apierr.IdempotencyKeyReuse(), false},
		{"408 keeps", true, apierr.New(408, "timeout", "x"), false},
		{"not reached does nothing", false, apierr.InvalidWorkflow("bad"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st := memclaim.New()
			c := New(st, "acct", "k", time.Hour)
			if tt.reach {
				if err := c.Reach(ctx); err != nil {
					t.Fatalf("Reach: %v", err)
				}
			} else {
				// Someone else holds the key; Settle on an unreached claim
				// must not release their claim.
				if ok, _ := st.Claim(ctx, "acct", "k", time.Hour); !ok {
					t.Fatal("setup claim failed")
				}
			}
			c.Settle(ctx, tt.outcome)
			if got := isFree(t, st, "acct", "k"); got != tt.released {
				t.Fatalf("after Settle(%v) key free = %v, want %v", tt.outcome, got, tt.released)
			}
		})
	}
}

// TestClaimRefuse: a request refused before it reached submission is
// answered idempotency_key_reuse when an earlier request holds its key
// (the contract refuses any later request with the key, a different or
// broken body included), and keeps its own refusal, with the key free
// again after Settle, when nobody does.
func TestClaimRefuse(t *testing.T) {
	ctx := context.Background()
	st := memclaim.New()
	invalid := apierr.InvalidWorkflow("bad")
	if err := New(st, "acct", "used", time.Hour).Reach(ctx); err != nil {
		t.Fatal(err)
	}
	c := New(st, "acct", "used", time.Hour)
	if e, _ := apierr.As(c.Refuse(ctx, invalid)); e == nil || e.Code != "idempotency_key_reuse" {
		t.Errorf("Refuse with a used key = %v, want idempotency_key_reuse", e)
	}
	c.Settle(ctx, c.Refuse(ctx, invalid))
	if isFree(t, st, "acct", "used") {
		t.Error("Settle released the earlier request's key")
	}

	fresh := New(st, "acct", "fresh", time.Hour)
	err := fresh.Refuse(ctx, invalid)
	if !errors.Is(err, invalid) {
		t.Errorf("Refuse with a fresh key = %v, want the request's own refusal", err)
	}
	fresh.Settle(ctx, err)
	if !isFree(t, st, "acct", "fresh") {
		t.Error("a fresh key stays held after a refused request")
	}
	for _, kept := range []error{nil, apierr.Upstream(errors.New("maybe committed"))} {
		if got := New(st, "acct", "other", time.Hour).Refuse(ctx, kept); got != kept {
			t.Errorf("Refuse(%v) = %v, want it unchanged", kept, got)
		}
	}
	if !isFree(t, st, "acct", "other") {
		t.Error("Refuse of a success or an unknown outcome took the key")
	}
}

func TestClaimSettleReleasedThenRetry(t *testing.T) {
	ctx := context.Background()
	st := memclaim.New()
	c := New(st, "acct", "k", time.Hour)
	if err := c.Reach(ctx); err != nil {
		t.Fatal(err)
	}
	c.Settle(ctx, apierr.InvalidWorkflow("bad"))
	// A released claim is untaken again: Reach claims anew rather than
	// being a no-op, and a second Settle does nothing harmful.
	if err := c.Reach(ctx); err != nil {
		t.Fatalf("Reach after release: %v", err)
	}
	if isFree(t, st, "acct", "k") {
		t.Fatal("Reach after release did not take the key")
	}
	if err := New(st, "acct", "k", time.Hour).Reach(ctx); err == nil {
		t.Fatal("a second request could take a key that was re-reached")
	}
}

func TestClaimSettleSurvivesCanceledContext(t *testing.T) {
	st := memclaim.New()
	ctx, cancel := context.WithCancel(context.Background())
	c := New(st, "acct", "k", time.Hour)
	if err := c.Reach(ctx); err != nil {
		t.Fatal(err)
	}
	cancel() // the client went away before the handler settled
	c.Settle(ctx, apierr.InvalidWorkflow("bad"))
	if !isFree(t, st, "acct", "k") {
		t.Fatal("Settle on a canceled request context did not release the key")
	}
}

func TestContextHelpers(t *testing.T) {
	ctx := context.Background()
	if From(ctx) != nil || KeyOf(ctx) != "" {
		t.Fatal("empty context carries a claim")
	}
	if err := Reach(ctx); err != nil {
		t.Fatalf("Reach without a claim: %v", err)
	}
	st := memclaim.New()
	c := New(st, "acct", "ctx-key", time.Hour)
	cctx := WithClaim(ctx, c)
	if From(cctx) != c || KeyOf(cctx) != "ctx-key" {
		t.Fatal("WithClaim did not carry the claim")
	}
	if err := Reach(cctx); err != nil {
		t.Fatalf("Reach: %v", err)
	}
	if isFree(t, st, "acct", "ctx-key") {
		t.Fatal("Reach via context did not claim the key")
	}
}

// notSentErr stands for a driver error that knows whether its write left
// (pgconn's errors answer SafeToRetry the same way).
type notSentErr struct{ safe bool }

func (e notSentErr) Error() string     { return "connect: connection refused" }
func (e notSentErr) SafeToRetry() bool { return e.safe }
