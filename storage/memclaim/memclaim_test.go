package memclaim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/storetest"
)

func TestConformance(t *testing.T) {
	storetest.RunClaims(t, func(t *testing.T) storage.ClaimStore {
		s := New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

// TestSweepBoundsMap checks that expired claims are dropped by the periodic
// sweep even when nobody asks for them again. A fake clock keeps it instant.
func TestSweepBoundsMap(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := New()
	s.nowFunc = func() time.Time { return now }
	ctx := context.Background()
	for i := range sweepEvery - 1 {
		if ok, err := s.Claim(ctx, "s", fmt.Sprint("old-", i), time.Second); err != nil || !ok {
			t.Fatalf("Claim old-%d = %v, %v", i, ok, err)
		}
	}
	now = now.Add(time.Minute) // every claim so far has expired
	if ok, err := s.Claim(ctx, "s", "new", time.Hour); err != nil || !ok {
		t.Fatalf("Claim new = %v, %v", ok, err)
	}
	if n := s.size(); n != 1 {
		t.Errorf("map holds %d entries after a sweep, want 1 (the live claim)", n)
	}
	if ok, _ := s.Claim(ctx, "s", "new", time.Hour); ok {
		t.Error("live claim was swept")
	}
}

func TestCanceledContext(t *testing.T) {
	s := New()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		call func() error
	}{
		{"Claim", func() error { _, err := s.Claim(ctx, "s", "k", time.Minute); return err }},
		{"Release", func() error { return s.Release(ctx, "s", "k") }},
	}
	for _, tc := range tests {
		if err := tc.call(); err == nil {
			t.Errorf("%s with a canceled context: err = nil", tc.name)
		}
	}
}
