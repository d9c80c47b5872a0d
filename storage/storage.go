// Package storage declares what comfygate keeps and the interfaces behind which
// it keeps it. Two implementations exist and pass one conformance suite
// (storage/storetest): postgres (production; Redis beside it for claims) and
// embedded (a SQLite file plus in-process claims, the zero-setup default).
//
// The database is the source of truth. Everything a ClaimStore holds may be
// lost (a Redis flush) without losing data; the rows carry their own
// uniqueness backstops.
package storage

import (
	"context"
	"errors"
	"time"

	"github.com/comfygate/comfygate/storage/blob"
)

// Sentinel errors. Implementations wrap driver errors with %w but return these
// for the conditions callers branch on.
var (
	// ErrNotFound means the record does not exist or is not the caller's;
	// the two are deliberately the same.
	ErrNotFound = errors.New("storage: not found")
	// ErrInUse means the record cannot be deleted while something depends on it.
	ErrInUse = errors.New("storage: in use")
	// ErrDuplicate means a uniqueness backstop refused the write (for example
	// a second asset created under one idempotency key after a claim was lost).
	ErrDuplicate = errors.New("storage: duplicate")
	// ErrNotSent means a write failed before anything reached the database
	// (no connection could be made, or the statement was never written):
	// it cannot have taken effect.
	ErrNotSent = errors.New("storage: the write never reached the database")
	// ErrNotCommitted means a write's transaction failed at a step of its
	// own before its commit (the blob's bytes could not be published) and
	// was rolled back: it cannot have taken effect either.
	ErrNotCommitted = errors.New("storage: the write was rolled back before its commit")
	// ErrInDoubt means a write's commit was sent and no answer came back:
	// it may have taken effect or not, and the store could not learn which.
	// Nothing outside the transaction that depends on its outcome (bytes
	// removed, a key released) has happened.
	ErrInDoubt = errors.New("storage: the write's outcome is unknown")
)

// Asset is one asset record over an immutable, content-addressed blob.
type Asset struct {
	ID        string
	AccountID string
	Hash      string // "blake3:<hex>"
	// ObjectKey is the key of the object that holds the blob's bytes, as
	// its blob row records it; "" for the object at Hash's own address.
	// Reads go through Object, never through the hash alone.
	ObjectKey   string
	SizeBytes   int64
	ContentType string
	FilePath    string
	Tags        []string
	// JobID is the job that produced the asset; empty for uploads.
	JobID string
	// DeploymentID is the deployment the asset was created through (for
	// an output, its job's); empty otherwise.
	DeploymentID string
	CreatedAt    time.Time
	// ExpiresAt is the asset's retention deadline; nil means never.
	ExpiresAt *time.Time
}

// Object names the object that holds the asset's bytes.
func (a Asset) Object() blob.Ref { return blob.Ref{Hash: a.Hash, Key: a.ObjectKey} }

// NewAsset is what a caller supplies to create an asset.
type NewAsset struct {
	// ID is assigned by the caller (a UUID) so that it can be logged before commit.
	ID          string
	AccountID   string
	Hash        string
	SizeBytes   int64
	ContentType string
	FilePath    string
	Tags        []string
	JobID       string
	// DeploymentID is the deployment the asset is created through, if any.
	// AddOutput takes it from the job.
	DeploymentID string
	ExpiresAt    *time.Time
	// IdempotencyKey, when set, must be unique per account among assets: the
	// durable backstop behind the ClaimStore.
	IdempotencyKey string
}

// Created reports what CreateAsset did.
type Created struct {
	Asset Asset
	// AccountHadBlob is true when the account already held an asset over the
	// same bytes before this one: the only case answered as a dedup hit.
	AccountHadBlob bool
}

// BlobFunc touches a blob's bytes while the store holds the blob's record, so
// that a concurrent create and delete of the same bytes cannot interleave
// between the blob store and the database. It is given the object the
// record names. A remove BlobFunc runs only after the transaction that
// dropped the blob's last reference has committed: bytes are never removed
// for a record that may survive.
type BlobFunc func(obj blob.Ref) error

// Publisher is the publish step of a create (CreateAsset, AddOutput): it
// makes the create's bytes the blob's while the store holds the blob's
// record. A blob.Upload is one.
//
// A blob's record keeps the object that holds its bytes (blob.Ref); the
// hash is the record's key, so content addressing and dedup live in the
// database, whatever key the blob store gave the object.
type Publisher interface {
	// Key is the key of the object the create's own bytes are in ("" for
	// their content address). Before Publish, the store holds a key
	// against RemoveOrphanBlobs until the create commits or fails, so that
	// the sweep never removes an object a create is about to record.
	Key() string
	// Publish is called on every create, with the blob's record held. held
	// is the object the record names, nil when the create's bytes are the
	// first: Publish keeps it when it still holds the bytes, or else makes
	// the create's own object visible. It returns the object that holds
	// the bytes from now on, which the record is updated to name. If
	// Publish fails nothing is recorded.
	Publish(held *blob.Ref) (blob.Ref, error)
}

// PublishFunc is a Publisher that adds no object of its own (Key ""): a
// create over bytes already stored (from-hash) checks held, and a test's
// stand-in publishes at the content address.
type PublishFunc func(held *blob.Ref) (blob.Ref, error)

// Key is "": a PublishFunc has no object of its own to hold.
func (PublishFunc) Key() string { return "" }

// Publish calls f.
func (f PublishFunc) Publish(held *blob.Ref) (blob.Ref, error) { return f(held) }

// AssetStore keeps asset records and the blob references behind them.
type AssetStore interface {
	// CreateAsset records a over the blob a.Hash. publish is called with the
	// blob's record held, on every create, and its answer recorded as the
	// blob's object (see Publisher). If publish fails nothing is recorded.
	CreateAsset(ctx context.Context, a NewAsset, publish Publisher) (Created, error)
	// GetAsset returns the account's asset, or ErrNotFound.
	GetAsset(ctx context.Context, accountID, id string) (Asset, error)
	// FindAsset returns the account's newest asset with this hash and file
	// path, or ErrNotFound.
	FindAsset(ctx context.Context, accountID, hash, filePath string) (Asset, error)
	// FindAssetByPath returns the account's newest unexpired asset whose file
	// path is filePath, or ErrNotFound.
	FindAssetByPath(ctx context.Context, accountID, filePath string) (Asset, error)
	// AccountBlob reports whether the account holds an asset over hash and,
	// if so, the blob's size.
	AccountBlob(ctx context.Context, accountID, hash string) (size int64, ok bool, err error)
	// DeleteAsset removes the record. When no record references the blob any
	// more, the blob's record stays unreferenced until, once the delete has
	// committed, remove is called with it held and deletes the object it
	// names; a remove that fails, or a commit whose outcome is unknown,
	// leaves the bytes to RemoveUnreferencedBlobs (the delete itself has
	// then succeeded, or answers its error). Returns ErrNotFound, or
	// ErrInUse while the asset is an output of a job that is not expired.
	DeleteAsset(ctx context.Context, accountID, id string, remove BlobFunc) error
	// DeleteExpiredAssets removes up to limit assets whose ExpiresAt is before
	// now and then, as DeleteAsset does, the bytes of blobs left
	// unreferenced. It returns how many assets it removed, with the joined
	// remove errors if any.
	DeleteExpiredAssets(ctx context.Context, now time.Time, limit int, remove BlobFunc) (int, error)
	// RemoveUnreferencedBlobs calls remove for up to limit blobs whose last
	// reference went in a transaction that committed without their bytes
	// being removed after it (the process stopped, the commit's outcome was
	// unknown to it, the blob store refused), and forgets them. It returns
	// how many it removed, and the joined remove errors if any.
	RemoveUnreferencedBlobs(ctx context.Context, limit int, remove BlobFunc) (int, error)
	// RemoveOrphanBlobs calls remove for each of objects (a page of the
	// blob store's List) that no blob record names: bytes published by a
	// create whose transaction then failed, a record's object replaced by
	// another, an object at a content address whose record names another
	// key. An object at its address is held by its hash as a create and a
	// delete hold it (a create of the same bytes waits, then publishes them
	// again); an object with a key as a create holds its own key (see
	// Publisher.Key). It returns how many it removed, and the joined remove
	// errors if any.
	RemoveOrphanBlobs(ctx context.Context, objects []blob.Ref, remove BlobFunc) (int, error)
}

// APIKey is an account-scoped credential. Only a digest of its secret is kept.
type APIKey struct {
	ID        string
	AccountID string
	Name      string
	CreatedAt time.Time
	RevokedAt *time.Time
}

// APIKeyStore keeps API keys.
type APIKeyStore interface {
	// CreateAPIKey stores k with the SHA-256 digest of its secret.
	CreateAPIKey(ctx context.Context, k APIKey, digest []byte) error
	// APIKeyDigest returns the key and its digest by id; ErrNotFound when the
	// key does not exist or is revoked.
	APIKeyDigest(ctx context.Context, id string) (APIKey, []byte, error)
	// RevokeAPIKey revokes the key; ErrNotFound when it does not exist.
	RevokeAPIKey(ctx context.Context, id string) error
	// ListAPIKeys lists an account's keys, or every key when accountID is empty.
	ListAPIKeys(ctx context.Context, accountID string) ([]APIKey, error)
}

// Store is one storage backend.
type Store interface {
	AssetStore
	APIKeyStore
	JobStore
	DeploymentStore
	NativeStore
	CreditStore
	// Migrate brings the schema up to date. It is safe to call concurrently
	// from several processes.
	Migrate(ctx context.Context) error
	// Ping checks that the backend answers (a readiness probe).
	Ping(ctx context.Context) error
	// Close releases the backend's connections.
	Close() error
}

// ClaimStore holds single-use claims (idempotency keys) with an expiry. It is
// a fast, losable guard: Redis in production, in-process on the embedded default.
type ClaimStore interface {
	// Claim takes key within scope for ttl. It reports false when the key is
	// already held.
	Claim(ctx context.Context, scope, key string, ttl time.Duration) (bool, error)
	// Release frees a claim so that a legitimate retry may proceed.
	Release(ctx context.Context, scope, key string) error
	// Close releases the store's connections.
	Close() error
}
