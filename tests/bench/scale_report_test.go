package bench

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestBenchScale: every figure of issue 19 on a store seeded with N jobs
// (tests/bench/seed: 1,000 accounts, one busy account with a tenth of the
// jobs, a tenth queued, the rest mostly succeeded with an output and its
// blob, uploads besides), at a small and a large N in the same run, and
// the large/small ratio of each. Postgres at 10k and 1M, the embedded
// store at 10k and 200k (COMFYGATE_SCALE_SIZES and
// COMFYGATE_SCALE_EMBEDDED_SIZES, comma-separated; "0" skips a backend):
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 120m -v -run TestBenchScale$ ./tests/bench/
//
// The gateway is API-only (no_execute) with API-key auth, on Postgres+Redis
// or embedded. Submit: 16 clients, closed loop (raw client), p99 of the
// successful ones. GET job: open loop at 1,000 req/s of the busy account's
// last queued job (the back of a deep queue). Lists: 300 sequential GETs
// of the first page and of a page half-way through the account's jobs
// (cursor walked there), busy and quiet (acct-0500). Dedup: 500 HEAD
// by-hash and 500 from-hash (same path: the existing asset) of an upload.
// Claims: 4 claimers on the store (as dispatchers), claims/s. Reaper: up to
// 100,000 of the oldest queued or succeeded jobs made due (outputs with
// them), then the sweeps at the default batch and pause (ExpireJobs, then
// DeleteExpiredAssets; blob files are not on disk for seeded rows, so the
// file removal is not timed), run from the bench process against the same
// store for at most COMFYGATE_SCALE_SWEEP_SECONDS (120) while the 16
// clients submit; submit p99 during the sweep against just before it.
func TestBenchScale(t *testing.T) {
	requireBench(t)
	dur := time.Duration(envInt("COMFYGATE_BENCH_SECONDS", 5)) * time.Second
	backends := []struct {
		name  string
		sizes []int
		open  func(t *testing.T, n int) scaleStore
	}{
		{"postgres", sizes("COMFYGATE_SCALE_SIZES", "10000,1000000"), postgresScale},
		{"embedded", sizes("COMFYGATE_SCALE_EMBEDDED_SIZES", "10000,200000"), embeddedScale},
	}
	var sb strings.Builder
	for _, b := range backends {
		if len(b.sizes) == 0 {
			continue
		}
		var results []scaleResult
		var seeds []string
		for _, n := range b.sizes {
			var r scaleResult
			t.Run(fmt.Sprintf("%s-%d", b.name, n), func(t *testing.T) {
				s := b.open(t, n)
				t.Logf("seeded %s", s.seed)
				seeds = append(seeds, fmt.Sprintf("%d jobs: %s", n, s.seed.Took.Round(time.Second/10)))
				r = measureScale(t, s, dur)
				t.Logf("%+v", r)
			})
			results = append(results, r)
		}
		if len(results) < 2 {
			continue
		}
		small, large := results[0], results[len(results)-1]
		fmt.Fprintf(&sb, "\n%s, N = %d vs %d (seeding %s)\n", b.name, b.sizes[0], b.sizes[len(b.sizes)-1], strings.Join(seeds, ", "))
		sb.WriteString("| figure | small | large | large/small |\n|---|---|---|---|\n")
		rowD := func(name string, a, b time.Duration) {
			fmt.Fprintf(&sb, "| %s | %s | %s | %.2f |\n", name, ms(a), ms(b), float64(b)/float64(max(a, 1)))
		}
		rowR := func(name string, a, b float64) {
			ratio := 0.0
			if b > 0 {
				ratio = a / b // a rate: small/large, so that > 1 is slower at scale
			}
			fmt.Fprintf(&sb, "| %s | %.0f/s | %.0f/s | %.2f (small/large) |\n", name, a, b, ratio)
		}
		rowR("submit throughput, 16 clients", small.submitRate, large.submitRate)
		rowD("submit p99", small.submitP99, large.submitP99)
		rowD("GET job p99 at 1000 req/s (back of the queue)", small.getP99, large.getP99)
		for _, k := range []string{"busy first", "busy deep", "quiet first", "quiet deep"} {
			rowD("list p99, "+k+" page", small.list[k], large.list[k])
		}
		rowD("dedup HEAD by-hash p99", small.headP99, large.headP99)
		rowD("dedup from-hash p99", small.hashP99, large.hashP99)
		rowR("claims, 4 claimers", small.claimRate, large.claimRate)
		rowR("reaper rows (expired jobs + deleted assets)", small.sweepRate, large.sweepRate)
		rowD("submit p99 before the sweep", small.submitP99Quiet, large.submitP99Quiet)
		rowD("submit p99 during the sweep", small.submitP99Sweep, large.submitP99Sweep)
		fmt.Fprintf(&sb, "| during/before the sweep | %.2f | %.2f | |\n",
			float64(small.submitP99Sweep)/float64(max(small.submitP99Quiet, 1)),
			float64(large.submitP99Sweep)/float64(max(large.submitP99Quiet, 1)))
	}
	t.Log(sb.String())
}
