package storage

import (
	"context"
	"time"
)

// NativePrompt is what the ComfyUI-compatible front (comfy_native) keeps
// about a job submitted through it, beside the job itself.
type NativePrompt struct {
	JobID     string
	AccountID string
	// ClientID is the WebSocket session (ComfyUI's client_id) that receives
	// the job's events; "" when the prompt named none.
	ClientID string
}

// MaxNativeIDs bounds the job ids one NativeStore call takes, so that a
// client's list cannot become an unbounded statement.
const MaxNativeIDs = 1000

// NativeStore keeps the ComfyUI front's own records: which WebSocket
// session a job reports to, and which jobs its history no longer shows.
// Jobs themselves stay in JobStore; nothing here changes a job.
type NativeStore interface {
	// CreateNativePrompt records p for the account's existing job p.JobID
	// (ErrNotFound when the account has no such job; ErrDuplicate when the
	// job already has a record).
	CreateNativePrompt(ctx context.Context, p NativePrompt) error
	// NativePrompts returns the account's records among jobIDs (at most
	// MaxNativeIDs), keyed by job id; jobs without one are absent.
	NativePrompts(ctx context.Context, accountID string, jobIDs []string) (map[string]NativePrompt, error)
	// ClientJobs returns the ids of the account's jobs submitted with
	// clientID that are not terminal (queued, running, canceling), oldest
	// first, at most limit.
	ClientJobs(ctx context.Context, accountID, clientID string, limit int) ([]string, error)
	// HideFromHistory hides the account's jobs among jobIDs (at most
	// MaxNativeIDs) from the front's history; ids that are not the
	// account's jobs are ignored. Hiding twice is a no-op.
	HideFromHistory(ctx context.Context, accountID string, jobIDs []string) error
	// ClearHistory hides every job of the account that completed at or
	// before at (a later clear moves the mark forward, never back).
	ClearHistory(ctx context.Context, accountID string, at time.Time) error
	// HistoryHidden reports which of jobIDs (at most MaxNativeIDs) the
	// account hid one by one, and the account's last clear mark (zero when
	// it never cleared).
	HistoryHidden(ctx context.Context, accountID string, jobIDs []string) (hidden map[string]bool, clearedAt time.Time, err error)
}
