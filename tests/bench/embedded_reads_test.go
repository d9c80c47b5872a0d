package bench

import (
	"context"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/tests/bench/seed"
)

// TestBenchEmbeddedReads: the embedded store's reads at the scale bench's
// two sizes (10k and 200k jobs), through the store itself (no gateway, no
// HTTP), sequentially: GetJob of the busy account's last queued job (its
// queue position included), the first page of the busy and of the quiet
// account, and claims. p50 and p99 of each; what the page cache
// (storage/embedded's cache_size) is measured by.
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 20m -v -run TestBenchEmbeddedReads ./tests/bench/
func TestBenchEmbeddedReads(t *testing.T) {
	requireBench(t)
	ctx := context.Background()
	for _, n := range sizes("COMFYGATE_SCALE_EMBEDDED_SIZES", "10000,200000") {
		s := embeddedScale(t, n)
		queued, err := s.st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 1, Statuses: []string{storage.JobQueued}})
		if err != nil || len(queued) == 0 {
			t.Fatalf("no queued job of the busy account: %v", err)
		}
		last := queued[0].ID
		list := func(account string) func() error {
			return func() error {
				_, err := s.st.ListJobs(ctx, account, storage.JobQuery{Limit: 100})
				return err
			}
		}
		for _, op := range []struct {
			name  string
			times int
			do    func() error
		}{
			{"GetJob, last queued job", 2000, func() error { _, err := s.st.GetJob(ctx, seed.BusyAccount, last); return err }},
			{"ListJobs, busy account's first page", 500, list(seed.BusyAccount)},
			{"ListJobs, quiet account's first page", 500, list(seed.QuietAccount)},
			{"ClaimJob", 500, func() error {
				_, err := s.st.ClaimJob(ctx, "builtin", claimOwner, time.Minute, 0, func(blob.Ref) error { return nil })
				return err
			}},
		} {
			lat := latencies(t, op.times, op.do)
			t.Logf("%d jobs, %s: p50 %v, p99 %v", n, op.name,
				Median(lat).Round(time.Microsecond), Percentile(lat, 99).Round(time.Microsecond))
		}
		if err := s.restore(); err != nil {
			t.Fatal(err)
		}
	}
}
