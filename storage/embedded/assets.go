package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// assetColumns is the SELECT list scanAsset reads, in order: the asset's
// columns and its blob's object key.
const assetColumns = `id, account_id, hash, size_bytes, content_type, file_path, tags, job_id, created_at, expires_at,
	coalesce(deployment_id, ''), coalesce((SELECT b.object_key FROM blobs b WHERE b.hash = assets.hash), '')`

// newestFirst orders ties on created_at by insertion order.
const newestFirst = `ORDER BY created_at DESC, rowid DESC LIMIT 1`

// CreateAsset records a over the blob a.Hash in one write transaction: it
// takes a reference on the blob row, calls publish while that row (and the
// whole database) is held, records the object publish answers with,
// inserts the asset, and commits. Any failure rolls every step back. A
// duplicate ID or idempotency key is refused with storage.ErrDuplicate
// before publish is called, so a refused create makes no bytes present.
// Holding the whole database also holds the create's own object key
// against RemoveOrphanBlobs, which runs in a write transaction too.
func (s *Store) CreateAsset(ctx context.Context, a storage.NewAsset, publish storage.Publisher) (storage.Created, error) {
	var created storage.Created
	tracked := storage.Track(publish)
	var rolledBack bool
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		created, err = createAssetTx(ctx, tx, a, tracked)
		rolledBack = err != nil
		return err
	})
	if err != nil {
		tracked.Failed(err, rolledBack)
		return storage.Created{}, err
	}
	return created, nil
}

// createAssetTx is CreateAsset inside the caller's write transaction (which
// AddOutput shares with the job output row).
func createAssetTx(ctx context.Context, tx *sql.Tx, a storage.NewAsset, publish storage.Publisher) (storage.Created, error) {
	if a.ID == "" || a.AccountID == "" || a.Hash == "" {
		return storage.Created{}, errors.New("embedded: CreateAsset needs ID, AccountID and Hash")
	}
	if publish == nil {
		return storage.Created{}, errors.New("embedded: CreateAsset needs a publisher")
	}
	tags := a.Tags
	if tags == nil {
		tags = []string{}
	}
	tagsJSON, err := json.Marshal(tags)
	if err != nil {
		return storage.Created{}, fmt.Errorf("embedded: encode tags: %w", err)
	}
	var expires *time.Time
	if a.ExpiresAt != nil {
		e := a.ExpiresAt.UTC().Truncate(time.Microsecond)
		expires = &e
	}
	created := storage.Created{Asset: storage.Asset{
		ID: a.ID, AccountID: a.AccountID, Hash: a.Hash, SizeBytes: a.SizeBytes,
		ContentType: a.ContentType, FilePath: a.FilePath, Tags: tags, JobID: a.JobID,
		DeploymentID: a.DeploymentID, CreatedAt: now(), ExpiresAt: expires,
	}}

	var dup bool
	if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM assets WHERE id = ?)
		OR EXISTS (SELECT 1 FROM assets WHERE account_id = ? AND idempotency_key = ?)`,
		a.ID, a.AccountID, nullString(a.IdempotencyKey)).Scan(&dup); err != nil {
		return storage.Created{}, fmt.Errorf("embedded: check duplicate: %w", err)
	}
	if dup {
		return storage.Created{}, storage.ErrDuplicate
	}
	if err := tx.QueryRowContext(ctx,
		`SELECT EXISTS (SELECT 1 FROM assets WHERE account_id = ? AND hash = ?)`,
		a.AccountID, a.Hash).Scan(&created.AccountHadBlob); err != nil {
		return storage.Created{}, fmt.Errorf("embedded: check account blob: %w", err)
	}
	// A new row names the create's own object; a row recorded before has
	// refs above 1 now, or names another object: it is another asset's, or
	// an unreferenced one (refs 0) whose bytes are still to be removed
	// (unreferenced.go), which the create takes over.
	var refs int64
	var recorded string
	if err := tx.QueryRowContext(ctx, `INSERT INTO blobs (hash, size, refs, object_key) VALUES (?, ?, 1, nullif(?, ''))
		ON CONFLICT (hash) DO UPDATE SET refs = refs + 1 RETURNING refs, coalesce(object_key, '')`,
		a.Hash, a.SizeBytes, publish.Key()).Scan(&refs, &recorded); err != nil {
		return storage.Created{}, fmt.Errorf("embedded: reference blob: %w", err)
	}
	var held *blob.Ref
	if refs > 1 || recorded != publish.Key() {
		held = &blob.Ref{Hash: a.Hash, Key: recorded}
	}
	obj, err := publish.Publish(held)
	if err == nil && obj.Hash != a.Hash {
		err = fmt.Errorf("published %s for %s", obj.Hash, a.Hash)
	}
	if err != nil {
		return storage.Created{}, fmt.Errorf("embedded: publish blob: %w: %w", storage.ErrNotCommitted, err)
	}
	if obj.Key != recorded {
		// The recorded object was gone and the create's own replaced it.
		if _, err := tx.ExecContext(ctx, `UPDATE blobs SET object_key = nullif(?, '') WHERE hash = ?`, obj.Key, a.Hash); err != nil {
			return storage.Created{}, fmt.Errorf("embedded: record blob object: %w", err)
		}
	}
	created.Asset.ObjectKey = obj.Key
	_, err = tx.ExecContext(ctx, `INSERT INTO assets
		(id, account_id, hash, size_bytes, content_type, file_path, tags, job_id, created_at, expires_at, idempotency_key,
		 deployment_id)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		a.ID, a.AccountID, a.Hash, a.SizeBytes, a.ContentType, a.FilePath, string(tagsJSON),
		nullString(a.JobID), formatTime(created.Asset.CreatedAt), nullTime(expires),
		nullString(a.IdempotencyKey), nullString(a.DeploymentID))
	if isUniqueViolation(err) {
		return storage.Created{}, fmt.Errorf("embedded: insert asset: %w", storage.ErrDuplicate)
	}
	if err != nil {
		return storage.Created{}, fmt.Errorf("embedded: insert asset: %w", err)
	}
	return created, nil
}

// GetAsset returns the account's asset, or storage.ErrNotFound.
func (s *Store) GetAsset(ctx context.Context, accountID, id string) (storage.Asset, error) {
	return s.queryAsset(ctx, `SELECT `+assetColumns+` FROM assets WHERE id = ? AND account_id = ?`, id, accountID)
}

// FindAsset returns the account's newest asset with this hash and file path.
// Expired assets still count until DeleteExpiredAssets removes them.
func (s *Store) FindAsset(ctx context.Context, accountID, hash, filePath string) (storage.Asset, error) {
	return s.queryAsset(ctx, `SELECT `+assetColumns+` FROM assets
		WHERE account_id = ? AND hash = ? AND file_path = ? `+newestFirst, accountID, hash, filePath)
}

// FindAssetByPath returns the account's newest unexpired asset at filePath.
func (s *Store) FindAssetByPath(ctx context.Context, accountID, filePath string) (storage.Asset, error) {
	return s.queryAsset(ctx, `SELECT `+assetColumns+` FROM assets
		WHERE account_id = ? AND file_path = ? AND (expires_at IS NULL OR expires_at > ?) `+newestFirst,
		accountID, filePath, formatTime(now()))
}

// AccountBlob reports whether the account holds an asset over hash and, if
// so, the blob's size. Bytes held only by other accounts are invisible.
func (s *Store) AccountBlob(ctx context.Context, accountID, hash string) (int64, bool, error) {
	var size int64
	err := s.read.QueryRowContext(ctx, `SELECT b.size FROM blobs b WHERE b.hash = ?
		AND EXISTS (SELECT 1 FROM assets a WHERE a.account_id = ? AND a.hash = b.hash)`,
		hash, accountID).Scan(&size)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("embedded: account blob: %w", err)
	}
	return size, true, nil
}

// DeleteAsset deletes the account's asset and drops its blob reference in
// one write transaction. When that was the last reference, the blob's row
// stays with refs 0 and its bytes are removed once the delete has
// committed (removeUnreferenced); a removal that fails leaves them to
// RemoveUnreferencedBlobs. An output of a job that has not expired is
// refused with storage.ErrInUse.
func (s *Store) DeleteAsset(ctx context.Context, accountID, id string, remove storage.BlobFunc) error {
	var last bool
	var hash string
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if err := releaseOutputRows(ctx, tx, accountID, id); err != nil {
			return err
		}
		err := tx.QueryRowContext(ctx,
			`DELETE FROM assets WHERE id = ? AND account_id = ? RETURNING hash`, id, accountID).Scan(&hash)
		if errors.Is(err, sql.ErrNoRows) {
			return storage.ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("embedded: delete asset: %w", err)
		}
		last, err = releaseBlob(ctx, tx, hash)
		return err
	})
	if err != nil {
		return err
	}
	if last {
		// The delete has succeeded whatever happens to the bytes now.
		_, _ = s.removeUnreferenced(ctx, []string{hash}, remove)
	}
	return nil
}

// DeleteExpiredAssets deletes up to limit assets whose expiry is before now,
// each in its own transaction, and then the bytes of the blobs left without
// a reference (removeUnreferenced); those it could not remove stay for
// RemoveUnreferencedBlobs. It returns how many assets it deleted, and the
// joined remove errors if any.
func (s *Store) DeleteExpiredAssets(ctx context.Context, now time.Time, limit int, remove storage.BlobFunc) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	cutoff := formatTime(now)
	// Outputs of jobs that have not expired are kept until their job expires.
	rows, err := s.read.QueryContext(ctx, `SELECT id FROM assets
		WHERE expires_at IS NOT NULL AND expires_at < ? AND NOT `+assetHeldByJob+`
		ORDER BY expires_at LIMIT ?`, cutoff, cutoff, limit)
	if err != nil {
		return 0, fmt.Errorf("embedded: list expired assets: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("embedded: list expired assets: %w", err)
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("embedded: list expired assets: %w", err)
	}

	deleted := 0
	var unreferenced []string
	for _, id := range ids {
		var hash string
		var gone, last bool
		err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
			// Re-check: the asset may have been deleted meanwhile.
			err := tx.QueryRowContext(ctx, `SELECT hash FROM assets
				WHERE id = ? AND expires_at IS NOT NULL AND expires_at < ? AND NOT `+assetHeldByJob,
				id, cutoff, cutoff).Scan(&hash)
			if errors.Is(err, sql.ErrNoRows) {
				return nil
			}
			if err != nil {
				return fmt.Errorf("embedded: delete expired asset: %w", err)
			}
			// Only output rows of expired jobs can remain; they go with the asset.
			if _, err := tx.ExecContext(ctx, `DELETE FROM job_outputs WHERE asset_id = ?`, id); err != nil {
				return fmt.Errorf("embedded: delete expired asset outputs: %w", err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM assets WHERE id = ?`, id); err != nil {
				return fmt.Errorf("embedded: delete expired asset: %w", err)
			}
			gone = true
			last, err = releaseBlob(ctx, tx, hash)
			return err
		})
		if err != nil {
			return deleted, errors.Join(err, s.removeAfter(ctx, unreferenced, remove))
		}
		if gone {
			deleted++
		}
		if last {
			unreferenced = append(unreferenced, hash)
		}
	}
	return deleted, s.removeAfter(ctx, unreferenced, remove)
}

// removeAfter is removeUnreferenced for a caller that reports only the
// errors.
func (s *Store) removeAfter(ctx context.Context, hashes []string, remove storage.BlobFunc) error {
	_, err := s.removeUnreferenced(ctx, hashes, remove)
	return err
}

// releaseBlob drops one reference on hash inside tx and reports whether it
// was the last. The row then stays, with refs 0, naming the bytes until
// removeUnreferenced removes them after the commit.
func releaseBlob(ctx context.Context, tx *sql.Tx, hash string) (bool, error) {
	var refs int64
	err := tx.QueryRowContext(ctx, `UPDATE blobs SET refs = refs - 1 WHERE hash = ? RETURNING refs`, hash).Scan(&refs)
	if err != nil {
		return false, fmt.Errorf("embedded: release blob: %w", err)
	}
	return refs == 0, nil
}

// queryAsset runs a single-asset query on the read pool.
func (s *Store) queryAsset(ctx context.Context, query string, args ...any) (storage.Asset, error) {
	a, err := scanAsset(s.read.QueryRowContext(ctx, query, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return storage.Asset{}, storage.ErrNotFound
	}
	if err != nil {
		return storage.Asset{}, fmt.Errorf("embedded: read asset: %w", err)
	}
	return a, nil
}

// scanner is what *sql.Row and *sql.Rows have in common.
type scanner interface{ Scan(dest ...any) error }

// scanAsset reads one row in assetColumns order; lead receives the columns
// a query selects before them (a job output's node, name and type).
func scanAsset(row scanner, lead ...any) (storage.Asset, error) {
	var (
		a                storage.Asset
		tags, createdAt  string
		jobID, expiresAt sql.NullString
	)
	dest := append(lead, &a.ID, &a.AccountID, &a.Hash, &a.SizeBytes, &a.ContentType, &a.FilePath,
		&tags, &jobID, &createdAt, &expiresAt, &a.DeploymentID, &a.ObjectKey)
	if err := row.Scan(dest...); err != nil {
		return storage.Asset{}, err
	}
	if err := json.Unmarshal([]byte(tags), &a.Tags); err != nil {
		return storage.Asset{}, fmt.Errorf("embedded: decode tags: %w", err)
	}
	a.JobID = jobID.String
	var err error
	if a.CreatedAt, err = parseTime(createdAt); err != nil {
		return storage.Asset{}, err
	}
	if a.ExpiresAt, err = parseNullTime(expiresAt); err != nil {
		return storage.Asset{}, err
	}
	return a, nil
}

// nullTime maps nil to NULL and a time to its stored text.
func nullTime(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: formatTime(*t), Valid: true}
}
