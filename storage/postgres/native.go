package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

// uuids keeps the well-formed ids of list (others name no job), refusing
// more than storage.MaxNativeIDs.
func uuids(op string, list []string) ([]string, error) {
	if len(list) > storage.MaxNativeIDs {
		return nil, fmt.Errorf("postgres: %s: %d ids, at most %d", op, len(list), storage.MaxNativeIDs)
	}
	out := make([]string, 0, len(list))
	for _, id := range list {
		if isUUID(id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// CreateNativePrompt records p for the account's existing job.
func (s *Store) CreateNativePrompt(ctx context.Context, p storage.NativePrompt) error {
	if !isUUID(p.JobID) {
		return fmt.Errorf("postgres: create native prompt: %w", storage.ErrNotFound)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO native_prompts (job_id, account_id, client_id)
		SELECT id, account_id, $3 FROM jobs WHERE id = $1 AND account_id = $2`, p.JobID, p.AccountID, p.ClientID)
	if err != nil {
		return mapErr("create native prompt", err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("postgres: create native prompt: %w", storage.ErrNotFound)
	}
	return nil
}

// NativePrompts returns the account's records among jobIDs.
func (s *Store) NativePrompts(ctx context.Context, accountID string, jobIDs []string) (map[string]storage.NativePrompt, error) {
	ids, err := uuids("native prompts", jobIDs)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT job_id::text, client_id FROM native_prompts
		WHERE account_id = $1 AND job_id = ANY($2::uuid[])`, accountID, ids)
	if err != nil {
		return nil, mapErr("native prompts", err)
	}
	out := map[string]storage.NativePrompt{}
	var p storage.NativePrompt
	_, err = pgx.ForEachRow(rows, []any{&p.JobID, &p.ClientID}, func() error {
		out[p.JobID] = storage.NativePrompt{JobID: p.JobID, AccountID: accountID, ClientID: p.ClientID}
		return nil
	})
	if err != nil {
		return nil, mapErr("native prompts", err)
	}
	return out, nil
}

// ClientJobs returns the account's unfinished jobs of one WebSocket session.
func (s *Store) ClientJobs(ctx context.Context, accountID, clientID string, limit int) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT j.id::text FROM native_prompts n JOIN jobs j ON j.id = n.job_id
		WHERE n.account_id = $1 AND n.client_id = $2 AND j.status IN ('queued', 'running', 'canceling')
		ORDER BY j.created_at, j.id LIMIT $3`, accountID, clientID, limit)
	if err != nil {
		return nil, mapErr("client jobs", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, mapErr("client jobs", err)
	}
	return ids, nil
}

// HideFromHistory hides the account's jobs among jobIDs.
func (s *Store) HideFromHistory(ctx context.Context, accountID string, jobIDs []string) error {
	ids, err := uuids("hide from history", jobIDs)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO native_history_hidden (account_id, job_id)
		SELECT account_id, id FROM jobs WHERE account_id = $1 AND id = ANY($2::uuid[])
		ON CONFLICT DO NOTHING`, accountID, ids)
	return mapErr("hide from history", err)
}

// ClearHistory moves the account's clear mark forward to at.
func (s *Store) ClearHistory(ctx context.Context, accountID string, at time.Time) error {
	_, err := s.pool.Exec(ctx, `INSERT INTO native_history_cleared (account_id, cleared_at) VALUES ($1, $2)
		ON CONFLICT (account_id) DO UPDATE
		SET cleared_at = greatest(native_history_cleared.cleared_at, excluded.cleared_at)`, accountID, at)
	return mapErr("clear history", err)
}

// HistoryHidden reports which of jobIDs the account hid, and its clear mark.
func (s *Store) HistoryHidden(ctx context.Context, accountID string, jobIDs []string) (map[string]bool, time.Time, error) {
	ids, err := uuids("history hidden", jobIDs)
	if err != nil {
		return nil, time.Time{}, err
	}
	rows, err := s.pool.Query(ctx, `SELECT job_id::text FROM native_history_hidden
		WHERE account_id = $1 AND job_id = ANY($2::uuid[])`, accountID, ids)
	if err != nil {
		return nil, time.Time{}, mapErr("history hidden", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, time.Time{}, mapErr("history hidden", err)
	}
	hidden := make(map[string]bool, len(list))
	for _, id := range list {
		hidden[id] = true
	}
	var mark time.Time
	err = s.pool.QueryRow(ctx, `SELECT cleared_at FROM native_history_cleared WHERE account_id = $1`,
		accountID).Scan(&mark)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return hidden, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, mapErr("history clear mark", err)
	}
	return hidden, mark.UTC(), nil
}
