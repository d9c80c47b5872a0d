package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// assetColumns is the select list scanAsset reads, in order: the asset's
// columns and its blob's object key.
const assetColumns = `id::text, account_id, hash, size_bytes, content_type, file_path,
	tags, coalesce(job_id::text, ''), created_at, expires_at, coalesce(deployment_id, ''),
	coalesce((SELECT b.object_key FROM blobs b WHERE b.hash = assets.hash), '')`

// scanAsset reads one row selected with assetColumns; lead receives the
// columns a query selects before them (a job output's node, name and type).
func scanAsset(row pgx.Row, lead ...any) (storage.Asset, error) {
	var a storage.Asset
	err := row.Scan(append(lead, &a.ID, &a.AccountID, &a.Hash, &a.SizeBytes, &a.ContentType, &a.FilePath,
		&a.Tags, &a.JobID, &a.CreatedAt, &a.ExpiresAt, &a.DeploymentID, &a.ObjectKey)...)
	if err != nil {
		return storage.Asset{}, err
	}
	if len(a.Tags) == 0 {
		a.Tags = nil
	}
	a.CreatedAt = a.CreatedAt.UTC()
	a.ExpiresAt = utcPtr(a.ExpiresAt)
	return a, nil
}

// CreateAsset records a over its blob in one transaction; see createAssetTx.
// Any failure rolls everything back, including the blob reference.
func (s *Store) CreateAsset(ctx context.Context, a storage.NewAsset, publish storage.Publisher) (storage.Created, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.Created{}, mapErr("create asset: begin", err)
	}
	defer rollback(ctx, tx)
	sess := sessionOf(tx.Conn())
	tracked := storage.Track(publish)
	created, err := createAssetTx(ctx, tx, a, tracked)
	if inDoubt(err) && !errors.Is(err, storage.ErrNotCommitted) {
		// The connection broke before the COMMIT was sent: the server
		// aborts the transaction, nothing of it can commit.
		err = fmt.Errorf("%w: %w", storage.ErrNotCommitted, err)
	}
	if err != nil {
		tracked.Failed(err, true)
		return storage.Created{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		if inDoubtCommit(err) {
			// The COMMIT was sent and no answer came back: learn whether
			// it committed (indoubt.go).
			created, err = s.resolveAsset(ctx, a, created, sess, err)
		} else {
			err = commitErr("create asset: commit", err)
		}
		tracked.Failed(err, false)
		return created, err
	}
	return created, nil
}

// createAssetTx is the reference protocol inside the caller's transaction:
//
//  1. hold the create's own object key (if any) against the orphan sweep
//     until commit (holdObjectKey);
//  2. upsert the blob row, incrementing refs (a new row names the create's
//     own object); this takes the row lock that every create and delete of
//     the hash serializes on until commit, and tells whether the blob was
//     recorded before (a row with refs 0 is an unreferenced blob whose
//     bytes are still to be removed, see unreferenced.go: the create
//     takes it over, and the bytes with it when they are still there);
//  3. note whether the account already held the bytes;
//  4. insert the asset, so an idempotency-key or ID conflict is refused
//     (storage.ErrDuplicate) before any bytes are made present;
//  5. publish the bytes while the lock is held, and record the object
//     publish answers with when it is not the one the row names.
func createAssetTx(ctx context.Context, tx pgx.Tx, a storage.NewAsset, publish storage.Publisher) (storage.Created, error) {
	if !isUUID(a.ID) {
		return storage.Created{}, fmt.Errorf("postgres: create asset: id %q is not a UUID", a.ID)
	}
	if a.JobID != "" && !isUUID(a.JobID) {
		return storage.Created{}, fmt.Errorf("postgres: create asset: job id %q is not a UUID", a.JobID)
	}
	own := publish.Key()
	if err := holdObjectKey(ctx, tx, own); err != nil {
		return storage.Created{}, mapErr("create asset: hold object key", err)
	}
	var refs int
	var recorded string
	if err := tx.QueryRow(ctx, `INSERT INTO blobs (hash, size, refs, object_key) VALUES ($1, $2, 1, nullif($3, ''))
		ON CONFLICT (hash) DO UPDATE SET refs = blobs.refs + 1 RETURNING refs, coalesce(object_key, '')`,
		a.Hash, a.SizeBytes, own).Scan(&refs, &recorded); err != nil {
		return storage.Created{}, mapErr("create asset: reference blob", err)
	}
	var held *blob.Ref
	if refs > 1 || recorded != own {
		// The row was there: other assets hold the bytes, or it is an
		// unreferenced row (refs 0) whose bytes are not removed yet.
		held = &blob.Ref{Hash: a.Hash, Key: recorded}
	}
	var had bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE account_id = $1 AND hash = $2)`,
		a.AccountID, a.Hash).Scan(&had); err != nil {
		return storage.Created{}, mapErr("create asset: check account blob", err)
	}

	tags := a.Tags
	if tags == nil {
		tags = []string{}
	}
	var idemKey *string
	if a.IdempotencyKey != "" {
		idemKey = &a.IdempotencyKey
	}
	row := tx.QueryRow(ctx, `INSERT INTO assets
		(id, account_id, hash, size_bytes, content_type, file_path, tags, job_id, expires_at, idempotency_key, deployment_id)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, nullif($11, ''))
		RETURNING `+assetColumns,
		a.ID, a.AccountID, a.Hash, a.SizeBytes, a.ContentType, a.FilePath, tags, nullUUID(a.JobID), a.ExpiresAt, idemKey,
		a.DeploymentID)
	created, err := scanAsset(row)
	if err != nil {
		return storage.Created{}, mapErr("create asset: insert", err)
	}
	obj, err := publish.Publish(held)
	if err == nil && obj.Hash != a.Hash {
		err = fmt.Errorf("published %s for %s", obj.Hash, a.Hash)
	}
	if err != nil {
		return storage.Created{}, fmt.Errorf("postgres: create asset: publish %s: %w: %w", a.Hash, storage.ErrNotCommitted, err)
	}
	if obj.Key != recorded {
		// The recorded object was gone and the create's own replaced it.
		if _, err := tx.Exec(ctx, `UPDATE blobs SET object_key = nullif($2, '') WHERE hash = $1`, a.Hash, obj.Key); err != nil {
			return storage.Created{}, mapErr("create asset: record object", err)
		}
	}
	created.ObjectKey = obj.Key
	return storage.Created{Asset: created, AccountHadBlob: had}, nil
}

// blobKeyLockClass is the first half of the transaction advisory lock that
// holds an object key between a create and the orphan sweep: "blob".
const blobKeyLockClass int32 = 0x626c6f62

// holdObjectKey takes the transaction lock on key (nothing for ""): a
// create holds its own object's key from before the object becomes
// visible until it commits or rolls back, and the orphan sweep takes the
// same lock before it looks for the key's row, so it never sees a create's
// object without the create's outcome. Two keys may share a lock (a hash
// collision): that only makes one wait for the other.
func holdObjectKey(ctx context.Context, tx pgx.Tx, key string) error {
	if key == "" {
		return nil
	}
	_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1::int4, hashtext($2))`, blobKeyLockClass, key)
	return err
}

// GetAsset returns the account's asset by id.
func (s *Store) GetAsset(ctx context.Context, accountID, id string) (storage.Asset, error) {
	if !isUUID(id) {
		return storage.Asset{}, fmt.Errorf("postgres: get asset: %w", storage.ErrNotFound)
	}
	a, err := scanAsset(s.pool.QueryRow(ctx,
		`SELECT `+assetColumns+` FROM assets WHERE id = $1 AND account_id = $2`, id, accountID))
	if err != nil {
		return storage.Asset{}, mapErr("get asset", err)
	}
	return a, nil
}

// FindAsset returns the account's newest asset with hash and filePath.
func (s *Store) FindAsset(ctx context.Context, accountID, hash, filePath string) (storage.Asset, error) {
	a, err := scanAsset(s.pool.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets
		WHERE account_id = $1 AND hash = $2 AND file_path = $3
		ORDER BY created_at DESC, id DESC LIMIT 1`, accountID, hash, filePath))
	if err != nil {
		return storage.Asset{}, mapErr("find asset", err)
	}
	return a, nil
}

// FindAssetByPath returns the account's newest unexpired asset at filePath.
// "Unexpired" is judged by this process's clock, the same clock the reaper
// passes to DeleteExpiredAssets.
func (s *Store) FindAssetByPath(ctx context.Context, accountID, filePath string) (storage.Asset, error) {
	a, err := scanAsset(s.pool.QueryRow(ctx, `SELECT `+assetColumns+` FROM assets
		WHERE account_id = $1 AND file_path = $2 AND (expires_at IS NULL OR expires_at > $3)
		ORDER BY created_at DESC, id DESC LIMIT 1`, accountID, filePath, time.Now()))
	if err != nil {
		return storage.Asset{}, mapErr("find asset by path", err)
	}
	return a, nil
}

// AccountBlob reports whether the account holds an asset over hash.
func (s *Store) AccountBlob(ctx context.Context, accountID, hash string) (int64, bool, error) {
	var size int64
	err := s.pool.QueryRow(ctx, `SELECT b.size FROM assets a JOIN blobs b ON b.hash = a.hash
		WHERE a.account_id = $1 AND a.hash = $2 LIMIT 1`, accountID, hash).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, mapErr("account blob", err)
	}
	return size, true, nil
}

// DeleteAsset deletes the account's asset and drops its blob reference in
// one transaction. When the reference was the last, the blob's row stays
// with refs 0 and its bytes are removed once the delete has committed
// (removeUnreferenced); a removal that fails, or a commit whose outcome is
// unknown, leaves them to RemoveUnreferencedBlobs. An output of a job that
// has not expired is refused with storage.ErrInUse; output rows of expired
// jobs go with the asset.
func (s *Store) DeleteAsset(ctx context.Context, accountID, id string, remove storage.BlobFunc) error {
	if !isUUID(id) {
		return fmt.Errorf("postgres: delete asset: %w", storage.ErrNotFound)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return mapErr("delete asset: begin", err)
	}
	defer rollback(ctx, tx)

	if err := releaseOutputRows(ctx, tx, accountID, id); err != nil {
		return err
	}
	var hash string
	err = tx.QueryRow(ctx, `DELETE FROM assets WHERE id = $1 AND account_id = $2 RETURNING hash`,
		id, accountID).Scan(&hash)
	if err != nil {
		return mapErr("delete asset", err)
	}
	last, err := dropRefs(ctx, tx, hash, 1)
	if err != nil {
		return fmt.Errorf("postgres: delete asset: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return commitErr("delete asset: commit", err)
	}
	if last {
		// The delete has succeeded whatever happens to the bytes now.
		_, _ = s.removeUnreferenced(ctx, []string{hash}, remove)
	}
	return nil
}

// dropRefs subtracts n references from hash's blob row (locking it) and
// reports whether none remain. The row then stays, with refs 0, naming the
// bytes until removeUnreferenced removes them after the commit.
func dropRefs(ctx context.Context, tx pgx.Tx, hash string, n int) (bool, error) {
	var refs int
	err := tx.QueryRow(ctx, `UPDATE blobs SET refs = refs - $2 WHERE hash = $1 RETURNING refs`, hash, n).Scan(&refs)
	if err != nil {
		// No row means the refs invariant is broken; that is an internal
		// error, not the caller's ErrNotFound, so no sentinel mapping here.
		return false, fmt.Errorf("release blob %s: %w", hash, err)
	}
	return refs == 0, nil
}

// DeleteExpiredAssets deletes up to limit assets that expired before now, in
// one transaction. Rows another reaper (or a concurrent delete) has locked are
// skipped, so several processes can reap at once. The batch is deleted set by
// set, a few statements whatever its size (one savepoint per hash cost ~1 s
// per 500 outputs): the blob rows are locked in hash order (concurrent
// reapers and deletes never deadlock), the outputs and assets deleted and the
// references dropped. The bytes of the blobs left without a reference are
// removed once the transaction has committed (removeUnreferenced); those it
// could not remove stay for RemoveUnreferencedBlobs. It returns how many
// assets were deleted, and the joined remove errors if any.
func (s *Store) DeleteExpiredAssets(ctx context.Context, now time.Time, limit int, remove storage.BlobFunc) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, mapErr("delete expired: begin", err)
	}
	defer rollback(ctx, tx)

	// Outputs of jobs that have not expired are kept until their job expires.
	// In assets_expires_at's order alone: "ORDER BY expires_at, id" sorted
	// by the selected id::text, which the index cannot give, so every due
	// asset sharing the first deadline was read and checked on each batch
	// (1.85 s a batch with 78k outputs expired at once on a 1M-job store;
	// 35 ms this way).
	rows, err := tx.Query(ctx, `SELECT id::text, hash FROM assets
		WHERE expires_at < $1 AND NOT `+assetHeldByJob("$1")+`
		ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED`, now, limit)
	if err != nil {
		return 0, mapErr("delete expired: select", err)
	}
	var ids, hashes []string
	for rows.Next() {
		var id, hash string
		if err := rows.Scan(&id, &hash); err != nil {
			rows.Close()
			return 0, mapErr("delete expired: scan", err)
		}
		ids, hashes = append(ids, id), append(hashes, hash)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, mapErr("delete expired: select", err)
	}
	if len(ids) == 0 {
		return 0, nil
	}
	slices.Sort(hashes)
	hashes = slices.Compact(hashes)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM blobs WHERE hash = ANY($1) ORDER BY hash FOR UPDATE`, hashes); err != nil {
		return 0, mapErr("delete expired: lock blobs", err)
	}
	deleted, zero, err := reapAssets(ctx, tx, ids)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete expired: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, commitErr("delete expired: commit", err)
	}
	if _, err := s.removeUnreferenced(ctx, zero, remove); err != nil {
		return deleted, fmt.Errorf("postgres: delete expired: %w", err)
	}
	return deleted, nil
}

// reapAssets deletes the assets ids (whose blob rows the caller has
// locked) with the output rows that name them (only expired jobs' can) and
// drops their blobs' references. It returns how many assets it deleted and
// the hashes (in order) of the blobs left without a reference, whose rows
// stay with refs 0 until their bytes are removed after the commit.
func reapAssets(ctx context.Context, tx pgx.Tx, ids []string) (int, []string, error) {
	if _, err := tx.Exec(ctx, `DELETE FROM job_outputs WHERE asset_id = ANY($1::uuid[])`, ids); err != nil {
		return 0, nil, fmt.Errorf("delete outputs: %w", err)
	}
	rows, err := tx.Query(ctx, `WITH a AS (DELETE FROM assets WHERE id = ANY($1::uuid[]) RETURNING hash),
			c AS (SELECT hash, count(*) AS n FROM a GROUP BY hash)
		UPDATE blobs SET refs = blobs.refs - c.n FROM c WHERE blobs.hash = c.hash
		RETURNING blobs.hash, blobs.refs, c.n`, ids)
	if err != nil {
		return 0, nil, fmt.Errorf("delete assets: %w", err)
	}
	n := 0
	var zero []string
	for rows.Next() {
		var hash string
		var refs, k int
		if err := rows.Scan(&hash, &refs, &k); err != nil {
			rows.Close()
			return 0, nil, fmt.Errorf("delete assets: %w", err)
		}
		n += k
		if refs == 0 {
			zero = append(zero, hash)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, nil, fmt.Errorf("delete assets: %w", err)
	}
	slices.Sort(zero)
	return n, zero, nil
}
