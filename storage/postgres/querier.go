package postgres

import (
	"context"
	"encoding/json"

	"github.com/jackc/pgx/v5"
)

// querier is what pgx.Tx and *pgxpool.Pool have in common.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// jsonParam maps an absent JSON value to NULL and a present one to its text.
func jsonParam(b json.RawMessage) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}
