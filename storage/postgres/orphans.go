package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// RemoveOrphanBlobs implements storage.AssetStore. One statement per
// layout finds the objects no row names: an object at its address is named
// by its hash's row when that row names no key; an object with a key by
// the row that names the key. Each candidate is then held the way a create
// holds it, in its own transaction, and looked up again before it goes.
func (s *Store) RemoveOrphanBlobs(ctx context.Context, objects []blob.Ref, remove storage.BlobFunc) (int, error) {
	var hashes, keys []string
	for _, o := range objects {
		if o.Key != "" {
			keys = append(keys, o.Key)
		} else {
			hashes = append(hashes, o.Hash)
		}
	}
	removed := 0
	var errs []error
	for _, layout := range []struct {
		find   string
		values []string
		remove func(context.Context, string, storage.BlobFunc) (bool, error)
	}{
		{`SELECT h FROM unnest($1::text[]) AS h
			WHERE NOT EXISTS (SELECT 1 FROM blobs WHERE hash = h AND object_key IS NULL)`, hashes, s.removeOrphanAddress},
		{`SELECT k FROM unnest($1::text[]) AS k
			WHERE NOT EXISTS (SELECT 1 FROM blobs WHERE object_key = k)`, keys, s.removeOrphanKey},
	} {
		if len(layout.values) == 0 {
			continue
		}
		rows, err := s.pool.Query(ctx, layout.find, layout.values)
		if err != nil {
			return removed, mapErr("remove orphan blobs: find", err)
		}
		candidates, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return removed, mapErr("remove orphan blobs: find", err)
		}
		for _, c := range candidates {
			ok, err := layout.remove(ctx, c, remove)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ok {
				removed++
			}
		}
	}
	return removed, errors.Join(errs...)
}

// removeOrphanAddress removes the object at hash's address unless its row
// names it, holding the hash by its row until the bytes are gone. With no
// row, the hold is a row inserted with refs 0: a concurrent create's upsert
// waits on it, and a create under way (its row not yet committed) makes the
// insert wait and then find the row. A row that names a key instead is
// locked and read again: the object at the address is then a leftover of
// a create that found the row's object in place (an earlier release's
// copy, or an aborted race), which no create of this release makes the
// row's again without holding the row.
func (s *Store) removeOrphanAddress(ctx context.Context, hash string, remove storage.BlobFunc) (bool, error) {
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
		var named bool
		err := tx.QueryRow(ctx, `SELECT object_key IS NULL FROM blobs WHERE hash = $1 FOR UPDATE`, hash).Scan(&named)
		if errors.Is(err, pgx.ErrNoRows) || err == nil && named {
			return false, nil // deleted meanwhile (the next pass looks again), or named
		}
		if err != nil {
			return false, mapErr("remove orphan blob: hold", err)
		}
	}
	if err := remove(blob.Ref{Hash: hash}); err != nil {
		return false, fmt.Errorf("postgres: remove orphan blob %s: %w", hash, err)
	}
	if tag.RowsAffected() == 1 {
		if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE hash = $1 AND refs = 0`, hash); err != nil {
			return false, mapErr("remove orphan blob: release", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return false, commitErr("remove orphan blob: commit", err)
	}
	return true, nil
}

// removeOrphanKey removes the object at key unless a row names it, holding
// the key as a create holds its own object's key (holdObjectKey): a create
// whose object this is has then committed (the row names it) or failed.
func (s *Store) removeOrphanKey(ctx context.Context, key string, remove storage.BlobFunc) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, mapErr("remove orphan blob: begin", err)
	}
	defer rollback(ctx, tx)
	if err := holdObjectKey(ctx, tx, key); err != nil {
		return false, mapErr("remove orphan blob: hold", err)
	}
	var named bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM blobs WHERE object_key = $1)`, key).Scan(&named); err != nil {
		return false, mapErr("remove orphan blob: look up", err)
	}
	if named {
		return false, nil
	}
	if err := remove(blob.Ref{Key: key}); err != nil {
		return false, fmt.Errorf("postgres: remove orphan blob %s: %w", key, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return false, commitErr("remove orphan blob: commit", err)
	}
	return true, nil
}
