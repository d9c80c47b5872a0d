package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/comfygate/comfygate/storage"
)

// CreateAPIKey stores k with the digest of its secret. A zero CreatedAt is
// set to now; a used ID is refused with storage.ErrDuplicate.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey, digest []byte) error {
	if k.ID == "" || len(digest) == 0 {
		return errors.New("embedded: CreateAPIKey needs an ID and a digest")
	}
	created := now()
	if !k.CreatedAt.IsZero() {
		created = k.CreatedAt
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO api_keys (id, account_id, name, digest, created_at, revoked_at)
			VALUES (?, ?, ?, ?, ?, ?)`, k.ID, k.AccountID, k.Name, digest, formatTime(created), nullTime(k.RevokedAt))
		if isUniqueViolation(err) {
			return fmt.Errorf("embedded: insert api key: %w", storage.ErrDuplicate)
		}
		if err != nil {
			return fmt.Errorf("embedded: insert api key: %w", err)
		}
		return nil
	})
}

// APIKeyDigest returns an unrevoked key and its digest.
func (s *Store) APIKeyDigest(ctx context.Context, id string) (storage.APIKey, []byte, error) {
	var digest []byte
	row := s.read.QueryRowContext(ctx, `SELECT id, account_id, name, created_at, revoked_at, digest
		FROM api_keys WHERE id = ? AND revoked_at IS NULL`, id)
	k, err := scanAPIKey(row.Scan, &digest)
	if errors.Is(err, sql.ErrNoRows) {
		return storage.APIKey{}, nil, storage.ErrNotFound
	}
	if err != nil {
		return storage.APIKey{}, nil, fmt.Errorf("embedded: read api key: %w", err)
	}
	return k, digest, nil
}

// RevokeAPIKey marks the key revoked. Revoking twice keeps the first time.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx,
			`UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?`, formatTime(now()), id)
		if err != nil {
			return fmt.Errorf("embedded: revoke api key: %w", err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("embedded: revoke api key: %w", err)
		}
		if n == 0 {
			return storage.ErrNotFound
		}
		return nil
	})
}

// ListAPIKeys lists an account's keys (every key when accountID is empty),
// revoked ones included, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]storage.APIKey, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT id, account_id, name, created_at, revoked_at
		FROM api_keys WHERE ? = '' OR account_id = ? ORDER BY created_at, id`, accountID, accountID)
	if err != nil {
		return nil, fmt.Errorf("embedded: list api keys: %w", err)
	}
	defer rows.Close()
	var keys []storage.APIKey
	for rows.Next() {
		k, err := scanAPIKey(rows.Scan)
		if err != nil {
			return nil, fmt.Errorf("embedded: list api keys: %w", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: list api keys: %w", err)
	}
	return keys, nil
}

// scanAPIKey reads id, account_id, name, created_at, revoked_at and any
// extra destinations that follow them in the SELECT list.
func scanAPIKey(scan func(dest ...any) error, extra ...any) (storage.APIKey, error) {
	var (
		k         storage.APIKey
		createdAt string
		revokedAt sql.NullString
	)
	dest := append([]any{&k.ID, &k.AccountID, &k.Name, &createdAt, &revokedAt}, extra...)
	if err := scan(dest...); err != nil {
		return storage.APIKey{}, err
	}
	var err error
	if k.CreatedAt, err = parseTime(createdAt); err != nil {
		return storage.APIKey{}, err
	}
	if k.RevokedAt, err = parseNullTime(revokedAt); err != nil {
		return storage.APIKey{}, err
	}
	return k, nil
}
