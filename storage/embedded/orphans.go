package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// RemoveOrphanBlobs implements storage.AssetStore. It runs in one write
// transaction: creates publish inside theirs, and writers take turns, so no
// create is between its publish and its commit while the objects are
// checked and removed. An object at its address is named by its hash's row
// when that row names no key; an object with a key by the row that names
// the key.
func (s *Store) RemoveOrphanBlobs(ctx context.Context, objects []blob.Ref, remove storage.BlobFunc) (int, error) {
	if len(objects) == 0 {
		return 0, nil
	}
	removed := 0
	var errs []error
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		for _, obj := range objects {
			query, arg := `SELECT EXISTS (SELECT 1 FROM blobs WHERE hash = ? AND object_key IS NULL)`, obj.Hash
			if obj.Key != "" {
				query, arg = `SELECT EXISTS (SELECT 1 FROM blobs WHERE object_key = ?)`, obj.Key
			}
			var named bool
			if err := tx.QueryRowContext(ctx, query, arg).Scan(&named); err != nil {
				return fmt.Errorf("embedded: remove orphan blobs: %w", err)
			}
			if named {
				continue
			}
			if err := remove(obj); err != nil {
				errs = append(errs, fmt.Errorf("embedded: remove orphan blob %s: %w", obj, err))
				continue
			}
			removed++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return removed, errors.Join(errs...)
}
