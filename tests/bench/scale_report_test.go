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
// last queued job (the back of a deep queue). Lists: 600 sequential GETs
// of the first page and of a page half-way through the account's jobs
// (cursor walked there), busy and quiet (seed.QuietAccount: ~300 jobs at
// every size). Dedup: 1,000 HEAD by-hash and 1,000 from-hash (same path:
// the existing asset) of an upload. Claims: 4 claimers on the store (as
// dispatchers), claims/s. After each round the store is restored to its
// seeded state (restoreSQL: the round's submissions deleted, its claims
// queued again). Reaper: up to
// 100,000 of the oldest queued or succeeded jobs made due (outputs with
// them), then the sweeps at the default batch and pause (ExpireJobs, then
// DeleteExpiredAssets; blob files are not on disk for seeded rows, so the
// file removal is not timed), run from the bench process against the same
// store for at most COMFYGATE_SCALE_SWEEP_SECONDS (120) while the 16
// clients submit; submit p99 during the sweep against just before it.
func TestBenchScale(t *testing.T) {
	requireBench(t)
	dur := time.Duration(envInt("COMFYGATE_BENCH_SECONDS", 5)) * time.Second
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 3)
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
		if len(b.sizes) != 2 {
			continue
		}
		// Both stores stay up; each round measures the small and the large
		// one back to back (in alternating order), so that the load the
		// shared machine carries at the time weighs on both alike.
		envs := make([]*scaleEnv, 2)
		var seeds []string
		for i, n := range b.sizes {
			s := b.open(t, n)
			t.Logf("%s: seeded %s", b.name, s.seed)
			seeds = append(seeds, fmt.Sprintf("%d jobs: %s", n, s.seed.Took.Round(time.Second/10)))
			envs[i] = prepareScale(t, s)
		}
		res := [2][]scaleResult{}
		for r := range rounds {
			quiet(t)
			for k := range 2 {
				i := (k + r) % 2
				res[i] = append(res[i], measureRound(t, envs[i], dur))
				if err := envs[i].s.restore(); err != nil {
					t.Fatalf("restore the store after round %d: %v", r+1, err)
				}
			}
		}
		reap := [2]scaleResult{}
		for i := range 2 {
			quiet(t)
			reap[i] = measureReaper(t, envs[i], dur)
			envs[i].g.Stop()
		}
		fmt.Fprintf(&sb, "\n%s, N = %d vs %d, %d rounds (seeding %s); medians over rounds, ratio = median of the rounds' large/small\n",
			b.name, b.sizes[0], b.sizes[1], rounds, strings.Join(seeds, ", "))
		sb.WriteString("| figure | small | large | large/small |\n|---|---|---|---|\n")
		row := func(name string, f func(scaleResult) float64, unit string, rate bool) {
			var a, c, ratio []float64
			for r := range rounds {
				x, y := f(res[0][r]), f(res[1][r])
				a, c = append(a, x), append(c, y)
				if rate && y > 0 {
					ratio = append(ratio, x/y)
				} else if !rate && x > 0 {
					ratio = append(ratio, y/x)
				}
			}
			note := ""
			if rate {
				note = " (small/large)"
			}
			fmt.Fprintf(&sb, "| %s | %.2f%s | %.2f%s | %.2f%s [%.2f–%.2f] |\n", name, Median(a), unit, Median(c), unit,
				Median(ratio), note, slicesMin(ratio), slicesMax(ratio))
		}
		msOf := func(d time.Duration) float64 { return float64(d) / 1e6 }
		row("submit throughput, 16 clients", func(r scaleResult) float64 { return r.submitRate }, "/s", true)
		row("submit p99", func(r scaleResult) float64 { return msOf(r.submitP99) }, " ms", false)
		row("GET job p99 at 1000 req/s (back of the queue)", func(r scaleResult) float64 { return msOf(r.getP99) }, " ms", false)
		for _, k := range []string{"busy first", "busy deep", "quiet first", "quiet deep"} {
			row("list p99, "+k+" page", func(r scaleResult) float64 { return msOf(r.list[k]) }, " ms", false)
		}
		row("dedup HEAD by-hash p99", func(r scaleResult) float64 { return msOf(r.headP99) }, " ms", false)
		row("dedup from-hash p99", func(r scaleResult) float64 { return msOf(r.hashP99) }, " ms", false)
		row("claims, 4 claimers", func(r scaleResult) float64 { return r.claimRate }, "/s", true)
		fmt.Fprintf(&sb, "| reaper: rows done (expired jobs + deleted assets) | %d in %.0f/s | %d in %.0f/s | |\n",
			reap[0].swept, reap[0].sweepRate, reap[1].swept, reap[1].sweepRate)
		for i, name := range []string{"small", "large"} {
			fmt.Fprintf(&sb, "| reaper, %s: submit p99 before / during the sweep | %s | %s | %.2f (during/before) |\n", name,
				ms(reap[i].submitP99Quiet), ms(reap[i].submitP99Sweep),
				float64(reap[i].submitP99Sweep)/float64(max(reap[i].submitP99Quiet, 1)))
		}
	}
	t.Log(sb.String())
}
