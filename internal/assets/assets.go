// Package assets is the domain service behind /api/v2/assets: ingest,
// dedup with per-account privacy, from-hash, lookup, delete and content. It
// knows nothing of Caddy; the comfy_assets handler parses requests and
// renders what this package returns.
package assets

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"path"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/idem"
	"github.com/comfygate/comfygate/internal/ingest"
	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// Retention bounds of the expires_in override (the contract's).
const (
	MinExpiresIn = 60
	MaxExpiresIn = 604800
)

// Service is the assets domain service.
type Service struct {
	Store storage.Store
	Blobs blob.Store
	// DefaultRetention is applied when a request has no expires_in; zero
	// means assets never expire.
	DefaultRetention time.Duration
	// MaxUploadBytes bounds a whole upload request body.
	MaxUploadBytes int64
	// Deployment is the serverless deployment new assets are created
	// through, if any; they carry its id.
	Deployment string
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Result is a created or found asset and how the response should report it.
type Result struct {
	Asset storage.Asset
	// New is true when the request minted a new record; false when an
	// identical existing record was returned as-is.
	New bool
	// CreatedNew is the asset's created_new: false only for a dedup hit on
	// bytes the caller's own account already held.
	CreatedNew bool
}

func (s *Service) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// expiry turns an expires_in override (0 = absent) into an expiry time.
func (s *Service) expiry(expiresIn int) (*time.Time, error) {
	var d time.Duration
	switch {
	case expiresIn == 0:
		d = s.DefaultRetention
	case expiresIn < MinExpiresIn || expiresIn > MaxExpiresIn:
		return nil, apierr.Validation(fmt.Sprintf("expires_in must be between %d and %d seconds", MinExpiresIn, MaxExpiresIn))
	default:
		d = time.Duration(expiresIn) * time.Second
	}
	if d <= 0 {
		return nil, nil
	}
	t := s.now().Add(d).UTC()
	return &t, nil
}

// Upload ingests a multipart upload body for account. Nothing is left
// behind on any failure: the staged bytes are discarded unless a record
// commits over them.
//
// Its asset.upload span has two children: asset.receive, the one pass that
// reads the body, hashes it (blake3) and streams it into the blob store,
// and asset.commit, the row and the bytes' publication at their address.
func (s *Service) Upload(ctx context.Context, account string, body io.Reader, contentType string) (_ Result, err error) {
	ctx, span := tracing.Start(ctx, "asset.upload")
	defer tracing.End(span, &err)
	rctx, receive := tracing.Start(ctx, "asset.receive")
	req, err := ingest.Parse(rctx, body, contentType, s.Blobs, ingest.Limits{MaxBytes: s.MaxUploadBytes})
	if err == nil && receive.IsRecording() {
		receive.SetAttributes(attribute.Int64("comfygate.asset.size", req.Size))
	}
	tracing.End(receive, &err)
	if err != nil {
		return Result{}, err
	}
	defer req.Upload.Abort()
	expires, err := s.expiry(req.ExpiresIn)
	if err != nil {
		return Result{}, err
	}
	if err := idem.Reach(ctx); err != nil {
		return Result{}, err
	}
	cctx, commit := tracing.Start(ctx, "asset.commit")
	created, err := s.Store.CreateAsset(cctx, storage.NewAsset{
		ID:             storage.NewID(),
		AccountID:      account,
		Hash:           req.Hash,
		SizeBytes:      req.Size,
		ContentType:    req.ContentType,
		FilePath:       req.FilePath,
		Tags:           req.Tags,
		DeploymentID:   s.Deployment,
		ExpiresAt:      expires,
		IdempotencyKey: idem.KeyOf(ctx),
	}, req.Upload)
	tracing.End(commit, &err)
	if err != nil {
		return Result{}, storeErr(err)
	}
	span.SetAttributes(tracing.AttrAssetID.String(created.Asset.ID))
	return Result{Asset: created.Asset, New: true, CreatedNew: !created.AccountHadBlob}, nil
}

// FromHashRequest is the body of POST /api/v2/assets/from-hash.
type FromHashRequest struct {
	Hash      string   `json:"hash"`
	FilePath  *string  `json:"file_path"`
	Tags      []string `json:"tags"`
	ExpiresIn *int     `json:"expires_in"`
}

// FromHash mints an asset over bytes the caller's account already holds. An
// identical reference (same hash and file path) is returned as-is. A hash the
// caller does not hold is blob_not_found, whoever else holds it.
func (s *Service) FromHash(ctx context.Context, account string, in FromHashRequest) (Result, error) {
	hash, err := blob.ParseHash(in.Hash)
	if err != nil {
		return Result{}, apierr.Validation("hash must be blake3:<64 hex digits>")
	}
	filePath := ""
	if in.FilePath != nil {
		cleaned, err := ingest.CleanFilePath(*in.FilePath)
		if err != nil {
			return Result{}, err
		}
		filePath = cleaned
	}
	expiresIn := 0
	if in.ExpiresIn != nil {
		if *in.ExpiresIn == 0 {
			return Result{}, apierr.Validation(fmt.Sprintf("expires_in must be between %d and %d seconds", MinExpiresIn, MaxExpiresIn))
		}
		expiresIn = *in.ExpiresIn
	}
	expires, err := s.expiry(expiresIn)
	if err != nil {
		return Result{}, err
	}
	if existing, err := s.Store.FindAsset(ctx, account, hash, filePath); err == nil && !s.expired(existing) {
		return Result{Asset: existing}, nil
	} else if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return Result{}, apierr.Upstream(err)
	}
	size, ok, err := s.Store.AccountBlob(ctx, account, hash)
	if err != nil {
		return Result{}, apierr.Upstream(err)
	}
	if !ok {
		return Result{}, apierr.BlobNotFound()
	}
	if err := idem.Reach(ctx); err != nil {
		return Result{}, err
	}
	created, err := s.Store.CreateAsset(ctx, storage.NewAsset{
		ID:             storage.NewID(),
		AccountID:      account,
		Hash:           hash,
		SizeBytes:      size,
		ContentType:    contentTypeOf(filePath),
		FilePath:       filePath,
		Tags:           in.Tags,
		DeploymentID:   s.Deployment,
		ExpiresAt:      expires,
		IdempotencyKey: idem.KeyOf(ctx),
	}, storage.PublishFunc(func(held *blob.Ref) (blob.Ref, error) { return s.requirePresent(ctx, hash, held) }))
	if err != nil {
		return Result{}, storeErr(err)
	}
	return Result{Asset: created.Asset, New: true, CreatedNew: !created.AccountHadBlob}, nil
}

// requirePresent is the publish step of a create over bytes already stored:
// it only checks that the recorded object is there.
func (s *Service) requirePresent(ctx context.Context, hash string, held *blob.Ref) (blob.Ref, error) {
	if held == nil {
		return blob.Ref{}, fmt.Errorf("blob %s is not recorded", hash)
	}
	if _, err := s.Blobs.Stat(ctx, *held); err != nil {
		return blob.Ref{}, fmt.Errorf("blob %s is recorded but its bytes are not available: %w", hash, err)
	}
	return *held, nil
}

// HasBlob reports whether the caller may mint from hash (HEAD by-hash).
func (s *Service) HasBlob(ctx context.Context, account, rawHash string) (bool, error) {
	hash, err := blob.ParseHash(rawHash)
	if err != nil {
		return false, nil // a malformed hash is simply not one of the caller's
	}
	_, ok, err := s.Store.AccountBlob(ctx, account, hash)
	if err != nil {
		return false, apierr.Upstream(err)
	}
	return ok, nil
}

// Get returns the caller's unexpired asset.
func (s *Service) Get(ctx context.Context, account, id string) (storage.Asset, error) {
	if _, err := uuid.Parse(id); err != nil {
		return storage.Asset{}, notFound()
	}
	a, err := s.Store.GetAsset(ctx, account, id)
	if errors.Is(err, storage.ErrNotFound) || (err == nil && s.expired(a)) {
		return storage.Asset{}, notFound()
	}
	if err != nil {
		return storage.Asset{}, apierr.Upstream(err)
	}
	return a, nil
}

// Delete removes the caller's asset record, and its bytes when no other
// record references them.
func (s *Service) Delete(ctx context.Context, account, id string) error {
	if _, err := uuid.Parse(id); err != nil {
		return notFound()
	}
	err := s.Store.DeleteAsset(ctx, account, id, s.removeBlob(ctx))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, storage.ErrNotFound):
		return notFound()
	case errors.Is(err, storage.ErrInUse):
		return apierr.AssetInUse()
	default:
		return apierr.Upstream(err)
	}
}

// Open returns the caller's asset and its bytes, read from the start. The
// caller closes the reader.
func (s *Service) Open(ctx context.Context, account, id string) (storage.Asset, io.ReadSeekCloser, error) {
	a, err := s.Get(ctx, account, id)
	if err != nil {
		return a, nil, err
	}
	f, err := s.OpenContent(ctx, a, 0)
	return a, f, err
}

// StatContent checks that the bytes of an asset (from Get) are available.
func (s *Service) StatContent(ctx context.Context, a storage.Asset) error {
	_, err := s.Blobs.Stat(ctx, a.Object())
	return contentErr(err)
}

// OpenContent returns the bytes of an asset (from Get), the first Read
// expected at from. The caller closes the reader.
func (s *Service) OpenContent(ctx context.Context, a storage.Asset, from int64) (io.ReadSeekCloser, error) {
	f, _, err := s.Blobs.Open(ctx, a.Object(), from)
	if err != nil {
		return nil, contentErr(err)
	}
	return f, nil
}

// contentErr maps a blob store error met serving an asset's bytes.
func contentErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return apierr.New(404, "blob_not_found", "the asset's bytes are not available")
	default:
		return apierr.Upstream(err)
	}
}

// SweepExpired removes assets past their retention, with their bytes when
// unreferenced. It returns how many it removed.
func (s *Service) SweepExpired(ctx context.Context, limit int) (int, error) {
	return s.Store.DeleteExpiredAssets(ctx, s.now(), limit, s.removeBlob(ctx))
}

// SweepUnreferenced removes the bytes of up to limit blobs whose last
// reference went without their removal following it (a crash, a commit
// with an unknown outcome, the blob store down). It returns how many it
// removed.
func (s *Service) SweepUnreferenced(ctx context.Context, limit int) (int, error) {
	return s.Store.RemoveUnreferencedBlobs(ctx, limit, s.removeBlob(ctx))
}

// SweepOrphans checks up to limit published objects after after (the zero
// Ref = from the first) and removes those no record names (bytes a create
// published in a transaction that then failed, an object a record no
// longer names). It returns where the next page starts (the zero Ref once
// the walk reached the end) and how many it removed.
func (s *Service) SweepOrphans(ctx context.Context, after blob.Ref, limit int) (next blob.Ref, removed int, err error) {
	objects, err := s.Blobs.List(ctx, after, limit)
	if err != nil {
		return after, 0, err
	}
	if len(objects) == limit {
		next = objects[len(objects)-1]
	}
	removed, err = s.Store.RemoveOrphanBlobs(ctx, objects, s.removeBlob(ctx))
	return next, removed, err
}

// removeBlob is the storage layer's remove step: it deletes the bytes of a
// blob whose last reference went, with the blob's row held. It runs
// without ctx's cancellation: the client's answer does not wait for it,
// and a client going away must not leave the bytes behind.
func (s *Service) removeBlob(ctx context.Context) storage.BlobFunc {
	return blob.RemoveFunc(ctx, s.Blobs)
}

func (s *Service) expired(a storage.Asset) bool {
	return a.ExpiresAt != nil && !a.ExpiresAt.After(s.now())
}

func notFound() error { return apierr.NotFound("asset not found") }

func storeErr(err error) error {
	if errors.Is(err, storage.ErrDuplicate) {
		return apierr.IdempotencyKeyReuse()
	}
	if _, ok := apierr.As(err); ok {
		return err
	}
	return apierr.Upstream(err)
}

// contentTypeOf guesses a media type from a file name.
func contentTypeOf(filePath string) string {
	if t := mime.TypeByExtension(path.Ext(filePath)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// Stored is an asset the gateway creates itself from bytes it fetched or
// decoded (a rehosted router result): no upload request, no job.
type Stored struct {
	ContentType string
	FilePath    string
	Tags        []string
	// ExpiresAt is the asset's end of retention; nil = the default retention.
	ExpiresAt *time.Time
}

// Keep reads r into the blob store (blake3, dedup against the bytes any
// account already holds) and creates an asset of account over them. Nothing
// is left behind on failure: the staged bytes are discarded unless the
// record commits over them. A read error of r is returned as is (wrapped),
// so that the caller can tell a source that broke off from the store.
func (s *Service) Keep(ctx context.Context, account string, r io.Reader, in Stored) (storage.Asset, error) {
	up, err := s.Blobs.NewUpload(ctx, "")
	if err != nil {
		return storage.Asset{}, err
	}
	defer up.Abort()
	if _, err := up.ReadFrom(r); err != nil {
		return storage.Asset{}, err
	}
	hash, size, err := up.Finish()
	if err != nil {
		return storage.Asset{}, err
	}
	expires := in.ExpiresAt
	if expires == nil {
		if expires, err = s.expiry(0); err != nil {
			return storage.Asset{}, err
		}
	}
	created, err := s.Store.CreateAsset(ctx, storage.NewAsset{
		ID:           storage.NewID(),
		AccountID:    account,
		Hash:         hash,
		SizeBytes:    size,
		ContentType:  in.ContentType,
		FilePath:     in.FilePath,
		Tags:         in.Tags,
		DeploymentID: s.Deployment,
		ExpiresAt:    expires,
	}, up)
	if err != nil {
		return storage.Asset{}, err
	}
	return created.Asset, nil
}
