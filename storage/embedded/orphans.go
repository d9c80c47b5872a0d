package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/comfygate/comfygate/storage"
)

// RemoveOrphanBlobs implements storage.AssetStore. It runs in one write
// transaction: creates publish inside theirs, and writers take turns, so no
// create is between its publish and its commit while the hashes are checked
// and removed.
func (s *Store) RemoveOrphanBlobs(ctx context.Context, hashes []string, remove storage.BlobFunc) (int, error) {
	if len(hashes) == 0 {
		return 0, nil
	}
	removed := 0
	var errs []error
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		for _, hash := range hashes {
			var named bool
			if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE hash = ?)`, hash).Scan(&named); err != nil {
				return fmt.Errorf("embedded: remove orphan blobs: %w", err)
			}
			if named {
				continue
			}
			if err := remove(hash); err != nil {
				errs = append(errs, fmt.Errorf("embedded: remove orphan blob %s: %w", hash, err))
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
