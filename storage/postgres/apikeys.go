package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

const apiKeyColumns = `id, account_id, name, created_at, revoked_at`

func scanAPIKey(row pgx.Row, extra ...any) (storage.APIKey, error) {
	var k storage.APIKey
	dest := append([]any{&k.ID, &k.AccountID, &k.Name, &k.CreatedAt, &k.RevokedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return storage.APIKey{}, err
	}
	k.CreatedAt = k.CreatedAt.UTC()
	k.RevokedAt = utcPtr(k.RevokedAt)
	return k, nil
}

// CreateAPIKey stores k and the digest of its secret. A zero CreatedAt is
// filled with the database's clock. A reused id is storage.ErrDuplicate.
func (s *Store) CreateAPIKey(ctx context.Context, k storage.APIKey, digest []byte) error {
	var createdAt *time.Time
	if !k.CreatedAt.IsZero() {
		createdAt = &k.CreatedAt
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO api_keys (id, account_id, name, digest, created_at, revoked_at)
		VALUES ($1, $2, $3, $4, coalesce($5, now()), $6)`,
		k.ID, k.AccountID, k.Name, digest, createdAt, k.RevokedAt)
	return mapErr("create api key", err)
}

// APIKeyDigest returns an unrevoked key and its digest.
func (s *Store) APIKeyDigest(ctx context.Context, id string) (storage.APIKey, []byte, error) {
	var digest []byte
	k, err := scanAPIKey(s.pool.QueryRow(ctx, `SELECT `+apiKeyColumns+`, digest FROM api_keys
		WHERE id = $1 AND revoked_at IS NULL`, id), &digest)
	if err != nil {
		return storage.APIKey{}, nil, mapErr("api key digest", err)
	}
	return k, digest, nil
}

// RevokeAPIKey marks the key revoked. Revoking twice keeps the first time.
func (s *Store) RevokeAPIKey(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1`, id)
	if err != nil {
		return mapErr("revoke api key", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: revoke api key: %w", storage.ErrNotFound)
	}
	return nil
}

// ListAPIKeys lists the account's keys (every key when accountID is empty),
// revoked ones included, oldest first.
func (s *Store) ListAPIKeys(ctx context.Context, accountID string) ([]storage.APIKey, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+apiKeyColumns+` FROM api_keys
		WHERE $1 = '' OR account_id = $1 ORDER BY created_at, id`, accountID)
	if err != nil {
		return nil, mapErr("list api keys", err)
	}
	defer rows.Close()
	keys := []storage.APIKey{}
	for rows.Next() {
		k, err := scanAPIKey(rows)
		if err != nil {
			return nil, mapErr("list api keys", err)
		}
		keys = append(keys, k)
	}
	if err := rows.Err(); err != nil {
		return nil, mapErr("list api keys", err)
	}
	return keys, nil
}
