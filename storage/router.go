package storage

import (
	"context"
	"errors"
	"time"
)

// ErrRouterCallFinished is returned by UpdateRouterCall when the update would
// move a finished record (answered, released, consumed) back to running or
// collecting: a late follower must not reopen a call another one answered.
var ErrRouterCallFinished = errors.New("storage: router call already finished")

// Router call states. A call is created running; it ends answered (the
// provider gave an answer, recorded for replay), released (refused before
// dispatch: its idempotency key is free again), collecting (our deadline hit
// while a provider handle is held: a retry with the same key collects it) or
// consumed (our deadline hit with nothing to collect: the key is spent).
const (
	RouterRunning    = "running"
	RouterAnswered   = "answered"
	RouterReleased   = "released"
	RouterCollecting = "collecting"
	RouterConsumed   = "consumed"
)

// RouterIdempotencyTTL is how long an Idempotency-Key binds its answer.
const RouterIdempotencyTTL = 24 * time.Hour

// MaxRouterResponseBytes bounds a recorded response body. Larger answers are
// delivered but not replayable (Replayable false).
const MaxRouterResponseBytes = 4 << 20

// RouterCall is the durable usage and audit record of one model-router call,
// keyed by the request id sent as X-Service-Request-Id.
type RouterCall struct {
	RequestID   string
	WorkspaceID string
	ModelID     string
	// State is one of the Router* states.
	State string
	// Bucket is the error bucket the call ended in ("" for success, or
	// "client_disconnected" when the caller left before the answer).
	Bucket string
	// HTTPStatus is the status the call answered (0 while running).
	HTTPStatus    int
	ReservedCents int64
	ChargedCents  int64
	// ProviderHandle is the adapter's handle as JSON (nil for handle-less calls).
	ProviderHandle []byte
	// IdempotencyKey and Fingerprint (a digest of method, path and body) bind
	// a key to one request; both empty for calls without a key.
	IdempotencyKey string
	Fingerprint    string
	// Response* is the recorded answer replayed for the same key.
	ResponseStatus      int
	ResponseContentType string
	ResponseBody        []byte
	Replayable          bool
	// RehostFailed counts the results of the recorded answer that kept the
	// partner's value because copying them failed; a replay repeats it as
	// Comfygate-Rehost-Failed.
	RehostFailed int
	CreatedAt    time.Time
	UpdatedAt    time.Time
	FinishedAt   *time.Time
	// KeyExpiresAt is when the idempotency key stops binding (nil without a key).
	KeyExpiresAt *time.Time
}

// RouterStore keeps router usage records and idempotency keys. It is a
// separate interface from Store; the model_router module asserts it on the
// app's store.
type RouterStore interface {
	// CreateRouterCall inserts c (State running). When c.IdempotencyKey is
	// set it also claims (workspace, key) for keyTTL, atomically with the
	// insert: if a live (unexpired, unreleased) claim exists, nothing is
	// written and the holder's record is returned with ErrDuplicate.
	CreateRouterCall(ctx context.Context, c RouterCall, keyTTL time.Duration) (holder RouterCall, err error)
	// UpdateRouterCall overwrites the mutable fields (state, bucket, status,
	// cents, handle, response, finished_at) of the record c.RequestID and
	// bumps UpdatedAt. ErrNotFound when there is no such record;
	// ErrRouterCallFinished (nothing written) when c.State is running or
	// collecting and the stored record has already finished.
	UpdateRouterCall(ctx context.Context, c RouterCall) error
	// TouchRouterCall bumps UpdatedAt of a live (running or collecting)
	// record, the heartbeat that shows its owner is alive. It reports false,
	// writing nothing, when the record is not live (or does not exist).
	TouchRouterCall(ctx context.Context, requestID string) (live bool, err error)
	// ClaimStaleRouterCall atomically takes over a live record whose
	// UpdatedAt is at least staleFor old (by the store's clock): it bumps
	// UpdatedAt and reports true. Of concurrent claims at most one wins; a
	// fresh, finished or missing record reports false.
	ClaimStaleRouterCall(ctx context.Context, requestID string, staleFor time.Duration) (claimed bool, err error)
	// GetRouterCall returns the record by request id, or ErrNotFound.
	GetRouterCall(ctx context.Context, requestID string) (RouterCall, error)
	// FindRouterCallByKey returns the record holding a live claim of
	// (workspace, key), or ErrNotFound.
	FindRouterCallByKey(ctx context.Context, workspaceID, key string) (RouterCall, error)
	// ReleaseRouterKey frees (workspace, key) if requestID holds it, so a
	// refused call's key can be used again. Releasing a key not held is a no-op.
	ReleaseRouterKey(ctx context.Context, workspaceID, key, requestID string) error
	// RecordRouterCalls writes finished records of calls without an
	// Idempotency-Key in one transaction (the usage writer batches them):
	// each is inserted, or overwrites the record with the same request id.
	RecordRouterCalls(ctx context.Context, calls []RouterCall) error
	// DeleteExpiredRouterKeys drops claims whose expiry passed before now and
	// returns how many it removed. Records stay (they are the audit trail).
	DeleteExpiredRouterKeys(ctx context.Context, now time.Time) (int, error)
}
