package assets

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestKeep(t *testing.T) {
	ctx := context.Background()
	s, clk := newService(t)
	data := []byte("a partner's result")
	expires := clk.Now().Add(time.Hour).UTC()
	in := Stored{ContentType: "image/png", FilePath: "router/req-1/0.png", Tags: []string{"router_result"}, ExpiresAt: &expires}
	a, err := s.Keep(ctx, "ws", strings.NewReader(string(data)), in)
	if err != nil {
		t.Fatal(err)
	}
	if a.Hash != hashOf(data) || a.SizeBytes != int64(len(data)) || a.JobID != "" || a.ContentType != "image/png" ||
		a.ExpiresAt == nil || a.ExpiresAt.Sub(expires).Abs() > time.Millisecond || a.FilePath != "router/req-1/0.png" || len(a.Tags) != 1 {
		t.Fatalf("kept %+v", a)
	}
	// The same bytes again: a second asset over the one stored blob.
	b, err := s.Keep(ctx, "ws", strings.NewReader(string(data)), in)
	if err != nil || b.ID == a.ID || b.Hash != a.Hash {
		t.Fatalf("second keep %+v, %v", b, err)
	}
	// A source that breaks off leaves nothing behind.
	boom := errors.New("source gone")
	if _, err := s.Keep(ctx, "ws", iotest.ErrReader(boom), in); !errors.Is(err, boom) {
		t.Fatalf("broken source: %v", err)
	}
	// Retention ends them like any asset.
	clk.Advance(time.Hour + time.Second)
	if n, err := s.SweepExpired(ctx, 100); err != nil || n != 2 {
		t.Fatalf("sweep = %d, %v", n, err)
	}
	if blobExists(t, s, a.Hash) {
		t.Fatal("bytes kept after both copies expired")
	}
}
