package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// Unreferenced blobs. The transaction that drops a blob's last reference
// (a delete, the retention sweep, a claim dropping an earlier attempt's
// outputs) keeps the blob's row with refs 0, still naming the object, and
// touches no bytes: until it has committed, its outcome is unknown, and
// bytes removed for a transaction that then rolls back would leave a
// surviving record without them (issue 37). Once it has committed,
// removeUnreferenced removes the bytes in a transaction of their own,
// holding the row; when that cannot happen (the commit's outcome is
// unknown, the process dies, the blob store refuses), the row stays and
// RemoveUnreferencedBlobs finds it on the next maintenance pass.
//
// A create of the same bytes in the meantime takes the row over (its
// upsert makes refs 1) and keeps the row's object when it is still there
// (createAssetTx), so the removal, which re-reads the row under its lock,
// finds refs above 0 and leaves it. Removing after the commit without
// keeping the row would race such a create: its new row would name the
// same content address (file_system, or an upload with a declared hash)
// whose bytes the late removal then deletes.

// unreferencedTimeout bounds one removal: it runs after the caller's
// request has its answer, detached from the request's cancellation.
const unreferencedTimeout = time.Minute

// removeUnreferenced removes the bytes of each of hashes whose row still
// has refs 0, and the row with them, one blob per transaction: the row is
// locked, remove is called with the object it names, and the row deleted.
// A row that a create took over meanwhile, or that another removal
// already deleted, is left alone. It returns how many blobs it removed,
// and the joined errors of those it could not (their rows stay).
func (s *Store) removeUnreferenced(ctx context.Context, hashes []string, remove storage.BlobFunc) (int, error) {
	if len(hashes) == 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unreferencedTimeout)
	defer cancel()
	removed := 0
	var errs []error
	for _, hash := range hashes {
		ok, err := s.removeUnreferencedBlob(ctx, hash, remove)
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

func (s *Store) removeUnreferencedBlob(ctx context.Context, hash string, remove storage.BlobFunc) (bool, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, mapErr("remove unreferenced blob: begin", err)
	}
	defer rollback(ctx, tx)
	obj := blob.Ref{Hash: hash}
	err = tx.QueryRow(ctx, `SELECT coalesce(object_key, '') FROM blobs WHERE hash = $1 AND refs = 0 FOR UPDATE`,
		hash).Scan(&obj.Key)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, mapErr("remove unreferenced blob: lock", err)
	}
	if err := remove(obj); err != nil {
		return false, fmt.Errorf("postgres: remove unreferenced blob %s: %w", obj, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE hash = $1`, hash); err != nil {
		return false, mapErr("remove unreferenced blob: delete row", err)
	}
	if err := tx.Commit(ctx); err != nil {
		// The bytes are gone; a row that stays names none and is removed
		// again (a missing object is success) on the next pass.
		return false, commitErr("remove unreferenced blob: commit", err)
	}
	return true, nil
}

// RemoveUnreferencedBlobs implements storage.AssetStore: it removes the
// bytes and rows of up to limit blobs left with refs 0 by a removal that
// did not happen after its commit (see the note above).
func (s *Store) RemoveUnreferencedBlobs(ctx context.Context, limit int, remove storage.BlobFunc) (int, error) {
	if limit <= 0 {
		return 0, nil
	}
	rows, err := s.pool.Query(ctx, `SELECT hash FROM blobs WHERE refs = 0 ORDER BY hash LIMIT $1`, limit)
	if err != nil {
		return 0, mapErr("remove unreferenced blobs: find", err)
	}
	hashes, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, mapErr("remove unreferenced blobs: find", err)
	}
	return s.removeUnreferenced(ctx, hashes, remove)
}
