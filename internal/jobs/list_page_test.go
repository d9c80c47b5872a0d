package jobs

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// TestListFullPageHasNextCursor: with more jobs than the largest page
// (100), a list at limit 100 says there is a next page, and the next page
// holds the rest. (The lookahead row, 101, was clamped away by the stores,
// so limit=100 never had a next_cursor.)
func TestListFullPageHasNextCursor(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	for range 101 {
		if _, err := e.svc.Store.CreateJob(ctx, storage.NewJob{ID: storage.NewID(), AccountID: "acct", Pool: "p",
			Workflow: json.RawMessage(`{}`), ExpiresAt: time.Now().Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		limit     int
		wantFirst int
	}{{100, 100}, {50, 50}, {0, 100}} {
		page, next, err := e.svc.List(ctx, "acct", storage.JobQuery{Limit: tc.limit})
		if err != nil || len(page) != tc.wantFirst || next == "" {
			t.Fatalf("limit %d: %d jobs, next %q, %v; want %d and a next cursor", tc.limit, len(page), next, err, tc.wantFirst)
		}
	}
	page, next, err := e.svc.List(ctx, "acct", storage.JobQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	cur, err := decodeCursor(next)
	if err != nil {
		t.Fatal(err)
	}
	rest, after, err := e.svc.List(ctx, "acct", storage.JobQuery{Limit: 100, Before: &cur})
	if err != nil || len(rest) != 1 || after != "" || rest[0].ID == page[99].ID {
		t.Fatalf("second page: %d jobs, next %q, %v; want the one job left and no cursor", len(rest), after, err)
	}
}
