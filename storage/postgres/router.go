package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.RouterStore = (*Store)(nil)

const routerColumns = `c.request_id, c.workspace_id, c.model_id, c.state, c.bucket, c.http_status,
	c.reserved_cents, c.charged_cents, c.provider_handle, coalesce(c.idempotency_key, ''), c.fingerprint,
	c.response_status, c.response_content_type, c.response_body, c.replayable, c.rehost_failed,
	c.created_at, c.updated_at, c.finished_at, c.key_expires_at`

func scanRouterCall(row pgx.Row) (storage.RouterCall, error) {
	var c storage.RouterCall
	err := row.Scan(&c.RequestID, &c.WorkspaceID, &c.ModelID, &c.State, &c.Bucket, &c.HTTPStatus,
		&c.ReservedCents, &c.ChargedCents, &c.ProviderHandle, &c.IdempotencyKey, &c.Fingerprint,
		&c.ResponseStatus, &c.ResponseContentType, &c.ResponseBody, &c.Replayable, &c.RehostFailed,
		&c.CreatedAt, &c.UpdatedAt, &c.FinishedAt, &c.KeyExpiresAt)
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	c.FinishedAt, c.KeyExpiresAt = utcPtr(c.FinishedAt), utcPtr(c.KeyExpiresAt)
	return c, err
}

// handleArg passes a handle as jsonb text, NULL when absent.
func handleArg(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

// CreateRouterCall inserts the record and, with a key, claims the key in the
// same transaction. The claim is one upsert that takes over only an expired
// row, so two concurrent claims of one key cannot both win: the loser's
// upsert returns no row and its transaction (with its record) rolls back.
func (s *Store) CreateRouterCall(ctx context.Context, c storage.RouterCall, keyTTL time.Duration) (storage.RouterCall, error) {
	if c.State == "" {
		c.State = storage.RouterRunning
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return storage.RouterCall{}, mapErr("create router call", err)
	}
	defer rollback(ctx, tx)
	var keyTTLArg any
	if c.IdempotencyKey != "" {
		keyTTLArg = keyTTL.Microseconds()
	}
	err = tx.QueryRow(ctx, `INSERT INTO router_calls (request_id, workspace_id, model_id, state, bucket,
			http_status, reserved_cents, charged_cents, provider_handle, idempotency_key, fingerprint,
			response_status, response_content_type, response_body, replayable, key_expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, nullif($10, ''), $11, $12, $13, $14, $15,
			now() + make_interval(secs => $16::bigint / 1e6))
		RETURNING created_at, updated_at, key_expires_at`,
		c.RequestID, c.WorkspaceID, c.ModelID, c.State, c.Bucket, c.HTTPStatus, c.ReservedCents,
		c.ChargedCents, handleArg(c.ProviderHandle), c.IdempotencyKey, c.Fingerprint, c.ResponseStatus,
		c.ResponseContentType, c.ResponseBody, c.Replayable, keyTTLArg,
	).Scan(&c.CreatedAt, &c.UpdatedAt, &c.KeyExpiresAt)
	if err != nil {
		return storage.RouterCall{}, mapErr("create router call", err)
	}
	c.CreatedAt, c.UpdatedAt, c.KeyExpiresAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC(), utcPtr(c.KeyExpiresAt)
	if c.IdempotencyKey != "" {
		var won string
		err = tx.QueryRow(ctx, `INSERT INTO router_keys (workspace_id, idempotency_key, request_id, expires_at)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (workspace_id, idempotency_key) DO UPDATE
			SET request_id = excluded.request_id, expires_at = excluded.expires_at
			WHERE router_keys.expires_at <= now()
			RETURNING request_id`, c.WorkspaceID, c.IdempotencyKey, c.RequestID, c.KeyExpiresAt).Scan(&won)
		if errors.Is(err, pgx.ErrNoRows) {
			rollback(ctx, tx)
			holder, herr := s.FindRouterCallByKey(ctx, c.WorkspaceID, c.IdempotencyKey)
			if herr != nil {
				return storage.RouterCall{}, fmt.Errorf("postgres: claim router key: %w: holder: %w", storage.ErrDuplicate, herr)
			}
			return holder, fmt.Errorf("postgres: claim router key: %w", storage.ErrDuplicate)
		}
		if err != nil {
			return storage.RouterCall{}, mapErr("claim router key", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return storage.RouterCall{}, commitErr("create router call: commit", err)
	}
	return c, nil
}

// UpdateRouterCall overwrites the record's mutable fields.
func (s *Store) UpdateRouterCall(ctx context.Context, c storage.RouterCall) error {
	tag, err := s.pool.Exec(ctx, `UPDATE router_calls SET state = $2, bucket = $3, http_status = $4,
		reserved_cents = $5, charged_cents = $6, provider_handle = $7::jsonb, response_status = $8,
		response_content_type = $9, response_body = $10, replayable = $11, updated_at = now(), finished_at = $12,
		rehost_failed = $13
		WHERE request_id = $1
		AND NOT ($2 IN ('running', 'collecting') AND state IN ('answered', 'released', 'consumed'))`,
		c.RequestID, c.State, c.Bucket, c.HTTPStatus, c.ReservedCents, c.ChargedCents, handleArg(c.ProviderHandle),
		c.ResponseStatus, c.ResponseContentType, c.ResponseBody, c.Replayable, c.FinishedAt, c.RehostFailed)
	if err != nil {
		return mapErr("update router call", err)
	}
	if tag.RowsAffected() > 0 {
		return nil
	}
	var one int
	err = s.pool.QueryRow(ctx, `SELECT 1 FROM router_calls WHERE request_id = $1`, c.RequestID).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: update router call: %w", storage.ErrNotFound)
	}
	if err != nil {
		return mapErr("update router call", err)
	}
	return fmt.Errorf("postgres: update router call %s: %w", c.RequestID, storage.ErrRouterCallFinished)
}

// TouchRouterCall bumps updated_at of a live record.
func (s *Store) TouchRouterCall(ctx context.Context, requestID string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE router_calls SET updated_at = now()
		WHERE request_id = $1 AND state IN ('running', 'collecting')`, requestID)
	if err != nil {
		return false, mapErr("touch router call", err)
	}
	return tag.RowsAffected() > 0, nil
}

// ClaimStaleRouterCall takes over a live record untouched for staleFor, by
// the database's clock (gateways' clocks may differ). The row lock of the
// UPDATE serializes concurrent claims; the loser re-checks the condition
// against the winner's fresh updated_at and matches nothing.
func (s *Store) ClaimStaleRouterCall(ctx context.Context, requestID string, staleFor time.Duration) (bool, error) {
	tag, err := s.pool.Exec(ctx, `UPDATE router_calls SET updated_at = now()
		WHERE request_id = $1 AND state IN ('running', 'collecting')
		AND updated_at <= now() - make_interval(secs => $2::bigint / 1e6)`, requestID, staleFor.Microseconds())
	if err != nil {
		return false, mapErr("claim stale router call", err)
	}
	return tag.RowsAffected() > 0, nil
}

// GetRouterCall reads a record by request id.
func (s *Store) GetRouterCall(ctx context.Context, requestID string) (storage.RouterCall, error) {
	c, err := scanRouterCall(s.pool.QueryRow(ctx, `SELECT `+routerColumns+` FROM router_calls c
		WHERE c.request_id = $1`, requestID))
	return c, mapErr("get router call", err)
}

// FindRouterCallByKey reads the record holding a live claim of the key.
func (s *Store) FindRouterCallByKey(ctx context.Context, workspaceID, key string) (storage.RouterCall, error) {
	c, err := scanRouterCall(s.pool.QueryRow(ctx, `SELECT `+routerColumns+` FROM router_keys k
		JOIN router_calls c ON c.request_id = k.request_id
		WHERE k.workspace_id = $1 AND k.idempotency_key = $2 AND k.expires_at > now()`, workspaceID, key))
	return c, mapErr("find router call by key", err)
}

// ReleaseRouterKey deletes the claim if requestID holds it.
func (s *Store) ReleaseRouterKey(ctx context.Context, workspaceID, key, requestID string) error {
	_, err := s.pool.Exec(ctx, `DELETE FROM router_keys
		WHERE workspace_id = $1 AND idempotency_key = $2 AND request_id = $3`, workspaceID, key, requestID)
	return mapErr("release router key", err)
}

// DeleteExpiredRouterKeys drops claims that expired before t.
func (s *Store) DeleteExpiredRouterKeys(ctx context.Context, t time.Time) (int, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM router_keys WHERE expires_at <= $1`, t)
	if err != nil {
		return 0, mapErr("delete expired router keys", err)
	}
	return int(tag.RowsAffected()), nil
}

// RecordRouterCalls upserts the batch in one multi-row statement: Postgres
// parses, plans and executes it once per batch rather than once per record,
// and all rows land or none. One statement cannot touch a row twice, so a
// request id that occurs twice keeps only its last record: the row that
// upserting them one by one would leave, since a request's workspace, model
// and reservation never change between its records.
func (s *Store) RecordRouterCalls(ctx context.Context, calls []storage.RouterCall) error {
	calls = lastPerRequest(calls)
	if len(calls) == 0 {
		return nil
	}
	n := len(calls)
	var (
		ids, workspaces, models, states = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		buckets, fingerprints, types    = make([]string, n), make([]string, n), make([]string, n)
		statuses, responseStatuses      = make([]int32, n), make([]int32, n)
		reserved, charged               = make([]int64, n), make([]int64, n)
		handles                         = make([]*string, n)
		bodies                          = make([][]byte, n)
		replayable                      = make([]bool, n)
		rehostFailed                    = make([]int32, n)
		finished                        = make([]*time.Time, n)
	)
	for i, c := range calls {
		ids[i], workspaces[i], models[i], states[i] = c.RequestID, c.WorkspaceID, c.ModelID, stateOr(c.State)
		buckets[i], fingerprints[i], types[i] = c.Bucket, c.Fingerprint, c.ResponseContentType
		statuses[i], responseStatuses[i] = int32(c.HTTPStatus), int32(c.ResponseStatus)
		reserved[i], charged[i] = c.ReservedCents, c.ChargedCents
		handles[i] = handleArg(c.ProviderHandle)
		bodies[i], replayable[i], finished[i] = c.ResponseBody, c.Replayable, c.FinishedAt
		rehostFailed[i] = int32(c.RehostFailed)
	}
	_, err := s.pool.Exec(ctx, `INSERT INTO router_calls (request_id, workspace_id, model_id, state, bucket, http_status,
			reserved_cents, charged_cents, provider_handle, fingerprint, response_status,
			response_content_type, response_body, replayable, finished_at, rehost_failed)
		SELECT r.id, r.ws, r.model, r.state, r.bucket, r.status, r.reserved, r.charged, r.handle::jsonb,
			r.fingerprint, r.rstatus, r.rtype, r.body, r.replayable, r.finished, r.rehost_failed
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::int[], $7::bigint[],
			$8::bigint[], $9::text[], $10::text[], $11::int[], $12::text[], $13::bytea[], $14::bool[],
			$15::timestamptz[], $16::int[])
			AS r(id, ws, model, state, bucket, status, reserved, charged, handle, fingerprint, rstatus, rtype,
				body, replayable, finished, rehost_failed)
		ON CONFLICT (request_id) DO UPDATE SET state = excluded.state, bucket = excluded.bucket,
			http_status = excluded.http_status, charged_cents = excluded.charged_cents,
			provider_handle = excluded.provider_handle, response_status = excluded.response_status,
			response_content_type = excluded.response_content_type, response_body = excluded.response_body,
			replayable = excluded.replayable, finished_at = excluded.finished_at,
			rehost_failed = excluded.rehost_failed, updated_at = now()`,
		ids, workspaces, models, states, buckets, statuses, reserved, charged, handles, fingerprints,
		responseStatuses, types, bodies, replayable, finished, rehostFailed)
	return mapErr("record router calls", err)
}

// lastPerRequest drops every record a later one of the same request
// replaces, keeping the order of the rest.
func lastPerRequest(calls []storage.RouterCall) []storage.RouterCall {
	last := make(map[string]int, len(calls))
	for i, c := range calls {
		last[c.RequestID] = i
	}
	if len(last) == len(calls) {
		return calls
	}
	kept := make([]storage.RouterCall, 0, len(last))
	for i, c := range calls {
		if last[c.RequestID] == i {
			kept = append(kept, c)
		}
	}
	return kept
}

func stateOr(s string) string {
	if s == "" {
		return storage.RouterAnswered
	}
	return s
}
