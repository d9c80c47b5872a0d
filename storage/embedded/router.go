package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.RouterStore = (*Store)(nil)

const routerColumns = `request_id, workspace_id, model_id, state, bucket, http_status,
	reserved_cents, charged_cents, provider_handle, idempotency_key, fingerprint,
	response_status, response_content_type, response_body, replayable, rehost_failed,
	created_at, updated_at, finished_at, key_expires_at`

type rowScanner interface{ Scan(dest ...any) error }

func scanRouterCall(row rowScanner) (storage.RouterCall, error) {
	var (
		c                    storage.RouterCall
		handle, key          sql.NullString
		body                 []byte
		replayable           int
		created, updated     string
		finished, keyExpires sql.NullString
	)
	err := row.Scan(&c.RequestID, &c.WorkspaceID, &c.ModelID, &c.State, &c.Bucket, &c.HTTPStatus,
		&c.ReservedCents, &c.ChargedCents, &handle, &key, &c.Fingerprint,
		&c.ResponseStatus, &c.ResponseContentType, &body, &replayable, &c.RehostFailed,
		&created, &updated, &finished, &keyExpires)
	if err != nil {
		return c, err
	}
	if handle.Valid {
		c.ProviderHandle = []byte(handle.String)
	}
	c.IdempotencyKey = key.String
	c.ResponseBody = body
	c.Replayable = replayable != 0
	if c.CreatedAt, err = parseTime(created); err != nil {
		return c, err
	}
	if c.UpdatedAt, err = parseTime(updated); err != nil {
		return c, err
	}
	if c.FinishedAt, err = parseNullTime(finished); err != nil {
		return c, err
	}
	c.KeyExpiresAt, err = parseNullTime(keyExpires)
	return c, err
}

func nullBytes(b []byte) sql.NullString { return sql.NullString{String: string(b), Valid: b != nil} }

func nullTimeText(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: formatTime(*t), Valid: true}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CreateRouterCall inserts the record and, with a key, claims it in the same
// IMMEDIATE transaction: the single writer makes check-then-insert atomic.
func (s *Store) CreateRouterCall(ctx context.Context, c storage.RouterCall, keyTTL time.Duration) (storage.RouterCall, error) {
	t := now()
	c.CreatedAt, c.UpdatedAt = t, t
	if c.State == "" {
		c.State = storage.RouterRunning
	}
	if c.IdempotencyKey != "" {
		exp := t.Add(keyTTL)
		c.KeyExpiresAt = &exp
	}
	var holder storage.RouterCall
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		if c.IdempotencyKey != "" {
			row := tx.QueryRowContext(ctx, `SELECT `+prefixed("c.")+` FROM router_keys k
				JOIN router_calls c ON c.request_id = k.request_id
				WHERE k.workspace_id = ? AND k.idempotency_key = ? AND k.expires_at > ?`,
				c.WorkspaceID, c.IdempotencyKey, formatTime(t))
			h, err := scanRouterCall(row)
			if err == nil {
				holder = h
				return storage.ErrDuplicate
			}
			if !errors.Is(err, sql.ErrNoRows) {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO router_calls (`+routerColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.RequestID, c.WorkspaceID, c.ModelID, c.State, c.Bucket, c.HTTPStatus,
			c.ReservedCents, c.ChargedCents, nullBytes(c.ProviderHandle), nullString(c.IdempotencyKey), c.Fingerprint,
			c.ResponseStatus, c.ResponseContentType, c.ResponseBody, boolInt(c.Replayable), c.RehostFailed,
			formatTime(c.CreatedAt), formatTime(c.UpdatedAt), nullTimeText(c.FinishedAt), nullTimeText(c.KeyExpiresAt))
		if err != nil {
			return err
		}
		if c.IdempotencyKey == "" {
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO router_keys (workspace_id, idempotency_key, request_id, expires_at)
			VALUES (?, ?, ?, ?)
			ON CONFLICT (workspace_id, idempotency_key) DO UPDATE
			SET request_id = excluded.request_id, expires_at = excluded.expires_at`,
			c.WorkspaceID, c.IdempotencyKey, c.RequestID, formatTime(*c.KeyExpiresAt))
		return err
	})
	switch {
	case errors.Is(err, storage.ErrDuplicate):
		return holder, fmt.Errorf("embedded: claim router key: %w", storage.ErrDuplicate)
	case err != nil && isUniqueViolation(err):
		return storage.RouterCall{}, fmt.Errorf("embedded: create router call: %w: %w", storage.ErrDuplicate, err)
	case err != nil:
		return storage.RouterCall{}, fmt.Errorf("embedded: create router call: %w", err)
	}
	return c, nil
}

// prefixed qualifies routerColumns with a table alias.
func prefixed(alias string) string {
	return alias + `request_id, ` + alias + `workspace_id, ` + alias + `model_id, ` + alias + `state, ` +
		alias + `bucket, ` + alias + `http_status, ` + alias + `reserved_cents, ` + alias + `charged_cents, ` +
		alias + `provider_handle, ` + alias + `idempotency_key, ` + alias + `fingerprint, ` +
		alias + `response_status, ` + alias + `response_content_type, ` + alias + `response_body, ` +
		alias + `replayable, ` + alias + `rehost_failed, ` + alias + `created_at, ` + alias + `updated_at, ` + alias + `finished_at, ` +
		alias + `key_expires_at`
}

// UpdateRouterCall overwrites the record's mutable fields.
func (s *Store) UpdateRouterCall(ctx context.Context, c storage.RouterCall) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE router_calls SET state = ?, bucket = ?, http_status = ?,
			reserved_cents = ?, charged_cents = ?, provider_handle = ?, response_status = ?,
			response_content_type = ?, response_body = ?, replayable = ?, updated_at = ?, finished_at = ?,
			rehost_failed = ?
			WHERE request_id = ?
			AND NOT (? IN ('running', 'collecting') AND state IN ('answered', 'released', 'consumed'))`,
			c.State, c.Bucket, c.HTTPStatus, c.ReservedCents, c.ChargedCents, nullBytes(c.ProviderHandle),
			c.ResponseStatus, c.ResponseContentType, c.ResponseBody, boolInt(c.Replayable),
			formatTime(now()), nullTimeText(c.FinishedAt), c.RehostFailed, c.RequestID, c.State)
		if err != nil {
			return fmt.Errorf("embedded: update router call: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return nil
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM router_calls WHERE request_id = ?`, c.RequestID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("embedded: update router call: %w", storage.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("embedded: update router call: %w", err)
		}
		return fmt.Errorf("embedded: update router call %s: %w", c.RequestID, storage.ErrRouterCallFinished)
	})
}

// TouchRouterCall bumps updated_at of a live record.
func (s *Store) TouchRouterCall(ctx context.Context, requestID string) (bool, error) {
	var n int64
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE router_calls SET updated_at = ?
			WHERE request_id = ? AND state IN ('running', 'collecting')`, formatTime(now()), requestID)
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("embedded: touch router call: %w", err)
	}
	return n > 0, nil
}

// ClaimStaleRouterCall takes over a live record untouched for staleFor. The
// single writer makes the conditional update atomic.
func (s *Store) ClaimStaleRouterCall(ctx context.Context, requestID string, staleFor time.Duration) (bool, error) {
	var n int64
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		t := now()
		res, err := tx.ExecContext(ctx, `UPDATE router_calls SET updated_at = ?
			WHERE request_id = ? AND state IN ('running', 'collecting') AND updated_at <= ?`,
			formatTime(t), requestID, formatTime(t.Add(-staleFor)))
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("embedded: claim stale router call: %w", err)
	}
	return n > 0, nil
}

// GetRouterCall reads a record by request id.
func (s *Store) GetRouterCall(ctx context.Context, requestID string) (storage.RouterCall, error) {
	c, err := scanRouterCall(s.read.QueryRowContext(ctx,
		`SELECT `+routerColumns+` FROM router_calls WHERE request_id = ?`, requestID))
	return c, routerErr("get router call", err)
}

// FindRouterCallByKey reads the record holding a live claim of the key.
func (s *Store) FindRouterCallByKey(ctx context.Context, workspaceID, key string) (storage.RouterCall, error) {
	c, err := scanRouterCall(s.read.QueryRowContext(ctx, `SELECT `+prefixed("c.")+` FROM router_keys k
		JOIN router_calls c ON c.request_id = k.request_id
		WHERE k.workspace_id = ? AND k.idempotency_key = ? AND k.expires_at > ?`,
		workspaceID, key, formatTime(now())))
	return c, routerErr("find router call by key", err)
}

// ReleaseRouterKey deletes the claim if requestID holds it.
func (s *Store) ReleaseRouterKey(ctx context.Context, workspaceID, key, requestID string) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM router_keys
			WHERE workspace_id = ? AND idempotency_key = ? AND request_id = ?`, workspaceID, key, requestID)
		if err != nil {
			return fmt.Errorf("embedded: release router key: %w", err)
		}
		return nil
	})
}

// DeleteExpiredRouterKeys drops claims that expired before t.
func (s *Store) DeleteExpiredRouterKeys(ctx context.Context, t time.Time) (int, error) {
	var n int64
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM router_keys WHERE expires_at <= ?`, formatTime(t))
		if err != nil {
			return err
		}
		n, _ = res.RowsAffected()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("embedded: delete expired router keys: %w", err)
	}
	return int(n), nil
}

func routerErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("embedded: %s: %w", op, storage.ErrNotFound)
	}
	return fmt.Errorf("embedded: %s: %w", op, err)
}

// RecordRouterCalls upserts finished keyless records in one transaction.
func (s *Store) RecordRouterCalls(ctx context.Context, calls []storage.RouterCall) error {
	if len(calls) == 0 {
		return nil
	}
	t := formatTime(now())
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		stmt, err := tx.PrepareContext(ctx, `INSERT INTO router_calls (`+routerColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)
			ON CONFLICT (request_id) DO UPDATE SET state = excluded.state, bucket = excluded.bucket,
				http_status = excluded.http_status, charged_cents = excluded.charged_cents,
				provider_handle = excluded.provider_handle, response_status = excluded.response_status,
				response_content_type = excluded.response_content_type, response_body = excluded.response_body,
				replayable = excluded.replayable, finished_at = excluded.finished_at, updated_at = excluded.updated_at,
				rehost_failed = excluded.rehost_failed`)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, c := range calls {
			state := c.State
			if state == "" {
				state = storage.RouterAnswered
			}
			if _, err := stmt.ExecContext(ctx, c.RequestID, c.WorkspaceID, c.ModelID, state, c.Bucket, c.HTTPStatus,
				c.ReservedCents, c.ChargedCents, nullBytes(c.ProviderHandle), c.Fingerprint,
				c.ResponseStatus, c.ResponseContentType, c.ResponseBody, boolInt(c.Replayable), c.RehostFailed,
				t, t, nullTimeText(c.FinishedAt)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("embedded: record router calls: %w", err)
	}
	return nil
}
