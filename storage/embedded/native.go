package embedded

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// idList renders job ids as the JSON array json_each reads, refusing more
// than storage.MaxNativeIDs.
func idList(op string, ids []string) (string, error) {
	if len(ids) > storage.MaxNativeIDs {
		return "", fmt.Errorf("embedded: %s: %d ids, at most %d", op, len(ids), storage.MaxNativeIDs)
	}
	if ids == nil {
		ids = []string{}
	}
	b, err := json.Marshal(ids)
	return string(b), err
}

// CreateNativePrompt records p for the account's existing job.
func (s *Store) CreateNativePrompt(ctx context.Context, p storage.NativePrompt) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO native_prompts (job_id, account_id, client_id)
			SELECT id, account_id, ? FROM jobs WHERE id = ? AND account_id = ?`, p.ClientID, p.JobID, p.AccountID)
		if isUniqueViolation(err) {
			return fmt.Errorf("embedded: create native prompt: %w", storage.ErrDuplicate)
		}
		if err != nil {
			return fmt.Errorf("embedded: create native prompt: %w", err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(storage.ErrNotFound, err)
		}
		return nil
	})
}

// NativePrompts returns the account's records among jobIDs.
func (s *Store) NativePrompts(ctx context.Context, accountID string, jobIDs []string) (map[string]storage.NativePrompt, error) {
	list, err := idList("native prompts", jobIDs)
	if err != nil {
		return nil, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT job_id, client_id FROM native_prompts
		WHERE account_id = ? AND job_id IN (SELECT value FROM json_each(?))`, accountID, list)
	if err != nil {
		return nil, fmt.Errorf("embedded: native prompts: %w", err)
	}
	defer rows.Close()
	out := map[string]storage.NativePrompt{}
	for rows.Next() {
		p := storage.NativePrompt{AccountID: accountID}
		if err := rows.Scan(&p.JobID, &p.ClientID); err != nil {
			return nil, fmt.Errorf("embedded: native prompts: %w", err)
		}
		out[p.JobID] = p
	}
	return out, rows.Err()
}

// ClientJobs returns the account's unfinished jobs of one WebSocket session.
func (s *Store) ClientJobs(ctx context.Context, accountID, clientID string, limit int) ([]string, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT j.id FROM native_prompts n JOIN jobs j ON j.id = n.job_id
		WHERE n.account_id = ? AND n.client_id = ? AND j.status IN ('queued', 'running', 'canceling')
		ORDER BY j.created_at, j.id LIMIT ?`, accountID, clientID, limit)
	if err != nil {
		return nil, fmt.Errorf("embedded: client jobs: %w", err)
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("embedded: client jobs: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// HideFromHistory hides the account's jobs among jobIDs.
func (s *Store) HideFromHistory(ctx context.Context, accountID string, jobIDs []string) error {
	list, err := idList("hide from history", jobIDs)
	if err != nil {
		return err
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO native_history_hidden (account_id, job_id)
			SELECT account_id, id FROM jobs WHERE account_id = ? AND id IN (SELECT value FROM json_each(?))`,
			accountID, list)
		if err != nil {
			return fmt.Errorf("embedded: hide from history: %w", err)
		}
		return nil
	})
}

// ClearHistory moves the account's clear mark forward to at.
func (s *Store) ClearHistory(ctx context.Context, accountID string, at time.Time) error {
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO native_history_cleared (account_id, cleared_at) VALUES (?, ?)
			ON CONFLICT (account_id) DO UPDATE SET cleared_at = max(cleared_at, excluded.cleared_at)`,
			accountID, formatTime(at))
		if err != nil {
			return fmt.Errorf("embedded: clear history: %w", err)
		}
		return nil
	})
}

// HistoryHidden reports which of jobIDs the account hid, and its clear mark.
func (s *Store) HistoryHidden(ctx context.Context, accountID string, jobIDs []string) (map[string]bool, time.Time, error) {
	list, err := idList("history hidden", jobIDs)
	if err != nil {
		return nil, time.Time{}, err
	}
	rows, err := s.read.QueryContext(ctx, `SELECT job_id FROM native_history_hidden
		WHERE account_id = ? AND job_id IN (SELECT value FROM json_each(?))`, accountID, list)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("embedded: history hidden: %w", err)
	}
	defer rows.Close()
	hidden := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, time.Time{}, fmt.Errorf("embedded: history hidden: %w", err)
		}
		hidden[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("embedded: history hidden: %w", err)
	}
	var mark string
	err = s.read.QueryRowContext(ctx, `SELECT cleared_at FROM native_history_cleared WHERE account_id = ?`,
		accountID).Scan(&mark)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return hidden, time.Time{}, nil
	case err != nil:
		return nil, time.Time{}, fmt.Errorf("embedded: history clear mark: %w", err)
	}
	at, err := parseTime(mark)
	return hidden, at, err
}
