// Package idem implements the v2 contract's single-use Idempotency-Key: a
// key is claimed only when a request reaches submission, released when the
// submission definitively fails without creating anything, and kept when the
// outcome is unknown. There is no replay.
//
// The idempotency handler puts a *Claim in the request context; the code that
// is about to commit calls Reach; the handler calls Settle with the outcome.
package idem

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
)

// DefaultTTL is the contract's key lifetime.
const DefaultTTL = 24 * time.Hour

// MaxKeyLen bounds a key; longer keys are refused as invalid requests.
const MaxKeyLen = 255

// Claim is one request's idempotency key and whether it has been taken.
type Claim struct {
	store storage.ClaimStore
	scope string
	key   string
	ttl   time.Duration

	mu      sync.Mutex
	claimed bool
}

// CheckKey validates a header value: 1..255 visible ASCII characters.
func CheckKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return apierr.InvalidRequest(fmt.Sprintf("Idempotency-Key must be 1 to %d characters", MaxKeyLen))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return apierr.InvalidRequest("Idempotency-Key must be visible ASCII characters")
		}
	}
	return nil
}

// New returns an untaken claim of key within scope (the caller's account).
func New(store storage.ClaimStore, scope, key string, ttl time.Duration) *Claim {
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Claim{store: store, scope: scope, key: key, ttl: ttl}
}

// Key returns the idempotency key.
func (c *Claim) Key() string { return c.key }

// Reach takes the key. It is called once the request is about to create
// something; a second request with the same key gets idempotency_key_reuse.
// Calling Reach again on the same claim is a no-op.
func (c *Claim) Reach(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.claimed || skipClaim {
		return nil
	}
	ok, err := c.store.Claim(ctx, c.scope, c.key, c.ttl)
	if err != nil {
		return apierr.Upstream(fmt.Errorf("claiming idempotency key: %w", err))
	}
	if !ok {
		return apierr.IdempotencyKeyReuse()
	}
	c.claimed = true
	return nil
}

// Settle releases the key when err is a definitive refusal: a 4xx that is not
// the reuse refusal itself (validation, 402, every 429), or a failure that
// never reached the database (see NotSent). Success, other 5xx and untyped
// errors (an outcome that may have committed) keep it. The release
// runs on a context detached from the request so a client disconnect cannot
// cancel it.
func (c *Claim) Settle(ctx context.Context, err error) {
	c.mu.Lock()
	claimed := c.claimed
	c.mu.Unlock()
	if !claimed || !(Definitive(err) || NotSent(err)) {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if c.store.Release(rctx, c.scope, c.key) == nil {
		c.mu.Lock()
		c.claimed = false
		c.mu.Unlock()
	}
}

// Refuse is the answer to a request that failed with err. The contract
// refuses every later request with a used key, whatever else is wrong
// with it, as idempotency_key_reuse; a request refused (definitively)
// before it reached submission has not tried its key yet, so Refuse tries
// it: held by an earlier request, the answer is the reuse refusal; free,
// it is err, and Settle gives the key back. A store that cannot be asked
// leaves err as it is.
func (c *Claim) Refuse(ctx context.Context, err error) error {
	c.mu.Lock()
	claimed := c.claimed
	c.mu.Unlock()
	if claimed || !Definitive(err) {
		return err
	}
	if reuse := c.Reach(ctx); reuse != nil {
		if e, ok := apierr.As(reuse); ok && e.Code == "idempotency_key_reuse" {
			return reuse
		}
	}
	return err
}

// Definitive reports whether err means that nothing was created.
func Definitive(err error) bool {
	if err == nil {
		return false
	}
	e, ok := apierr.As(err)
	if !ok {
		return false
	}
	if e.Code == "idempotency_key_reuse" {
		return false
	}
	return e.Status >= 400 && e.Status < 500 && e.Status != http.StatusRequestTimeout
}

// NotSent reports whether err says that the write it failed never took
// effect: storage.ErrNotSent (it never left the gateway),
// storage.ErrNotCommitted (its transaction was rolled back, for example
// when the blob store could not publish the bytes), or an error in its
// chain that answers SafeToRetry() true (as the Postgres driver's do when
// the statement was never written). Nothing can have been created, so the
// key is free for the client's retry.
func NotSent(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, storage.ErrNotSent) || errors.Is(err, storage.ErrNotCommitted) {
		return true
	}
	var safe interface{ SafeToRetry() bool }
	return errors.As(err, &safe) && safe.SafeToRetry()
}

type ctxKey struct{}

// WithClaim returns ctx carrying c.
func WithClaim(ctx context.Context, c *Claim) context.Context {
	return context.WithValue(ctx, ctxKey{}, c)
}

// From returns the claim in ctx, or nil.
func From(ctx context.Context) *Claim {
	c, _ := ctx.Value(ctxKey{}).(*Claim)
	return c
}

// Reach claims the request's key, if it carries one; without one it does nothing.
func Reach(ctx context.Context) error {
	if c := From(ctx); c != nil {
		return c.Reach(ctx)
	}
	return nil
}

// KeyOf returns the request's idempotency key, or "".
func KeyOf(ctx context.Context) string {
	if c := From(ctx); c != nil && !skipClaim {
		return c.key
	}
	return ""
}
