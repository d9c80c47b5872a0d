package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

// RemoveOrphanBlobs implements storage.AssetStore. One statement finds the
// hashes without a blob row; each of those is then held by inserting its
// row (refs 0) in its own transaction: a concurrent create's upsert waits
// on that row, and a create that is under way (its row not yet committed)
// makes the insert wait and then find the row, so the hash is skipped. A
// row that was inserted is deleted again with the bytes removed.
func (s *Store) RemoveOrphanBlobs(ctx context.Context, hashes []string, remove storage.BlobFunc) (int, error) {
	if len(hashes) == 0 {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT h FROM unnest($1::text[]) AS h
		WHERE NOT EXISTS (SELECT 1 FROM blobs WHERE hash = h)`, hashes)
	if err != nil {
		return 0, mapErr("remove orphan blobs: find", err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, mapErr("remove orphan blobs: find", err)
	}
	removed := 0
	var errs []error
	for _, hash := range candidates {
		ok, err := s.removeOrphanBlob(ctx, hash, remove)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			removed++
		}
	}
	return removed, errors.Join(errs...)
}

// removeOrphanBlob removes hash's bytes if no row names it, holding the
// hash by its row until the bytes are gone.
func (s *Store) removeOrphanBlob(ctx context.Context, hash string, remove storage.BlobFunc) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, mapErr("remove orphan blob: begin", err)
	}
	defer rollback(ctx, tx)
	tag, err := tx.Exec(ctx, `INSERT INTO blobs (hash, size, refs) VALUES ($1, 0, 0) ON CONFLICT (hash) DO NOTHING`, hash)
	if err != nil {
		return false, mapErr("remove orphan blob: hold", err)
	}
	if tag.RowsAffected() == 0 {
		return false, nil // a create holds or recorded it
	}
	if err := remove(hash); err != nil {
		return false, fmt.Errorf("postgres: remove orphan blob %s: %w", hash, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE hash = $1`, hash); err != nil {
		return false, mapErr("remove orphan blob: release", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, mapErr("remove orphan blob: commit", err)
	}
	return true, nil
}
