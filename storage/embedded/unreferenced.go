package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// Unreferenced blobs: the write transaction that drops a blob's last
// reference keeps the row with refs 0 and touches no bytes; they are
// removed once it has committed, in a write transaction of their own that
// re-reads the row (a create may have taken it over meanwhile). See the
// postgres store's note of the same name for why the row is kept.

// unreferencedTimeout bounds one removal: it runs after the caller's
// request has its answer, detached from the request's cancellation.
const unreferencedTimeout = time.Minute

// removeUnreferenced removes the bytes and the row of each of hashes whose
// row still has refs 0, one write transaction each. It returns how many it
// removed, and the joined errors of those it could not (their rows stay
// for RemoveUnreferencedBlobs).
func (s *Store) removeUnreferenced(ctx context.Context, hashes []string, remove storage.BlobFunc) (int, error) {
	if len(hashes) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unreferencedTimeout)
	defer cancel()
	removed := 0
	var errs []error
	for _, hash := range hashes {
		var gone bool
		err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
			obj := blob.Ref{Hash: hash}
			err := tx.QueryRowContext(ctx, `SELECT coalesce(object_key, '') FROM blobs WHERE hash = ? AND refs = 0`,
				hash).Scan(&obj.Key)
			if errors.Is(err, sql.ErrNoRows) {
				return nil // taken over by a create, or removed already
			}
			if err != nil {
				return fmt.Errorf("embedded: remove unreferenced blob: %w", err)
			}
			if err := remove(obj); err != nil {
				return fmt.Errorf("embedded: remove unreferenced blob %s: %w", obj, err)
			}
			if _, err := tx.ExecContext(ctx, `DELETE FROM blobs WHERE hash = ?`, hash); err != nil {
				return fmt.Errorf("embedded: remove unreferenced blob: delete row: %w", err)
			}
			gone = true
			return nil
		})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if gone {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// RemoveUnreferencedBlobs implements storage.AssetStore: it removes the
// bytes and rows of up to limit blobs left with refs 0 by a removal that
// did not happen after its commit.
func (s *Store) RemoveUnreferencedBlobs(ctx context.Context, limit int, remove storage.BlobFunc) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	rows, err := s.read.QueryContext(ctx, `SELECT hash FROM blobs WHERE refs = 0 ORDER BY hash LIMIT ?`, limit)
	if err != nil {
		return 0, fmt.Errorf("embedded: remove unreferenced blobs: find: %w", err)
	}
	var hashes []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("embedded: remove unreferenced blobs: find: %w", err)
		}
		hashes = append(hashes, h)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("embedded: remove unreferenced blobs: find: %w", err)
	}
	return s.removeUnreferenced(ctx, hashes, remove)
}
