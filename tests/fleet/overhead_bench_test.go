package fleet

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBenchDispatchOverhead is acceptance 3 of issue 16 (dispatch part):
// the cost per job of a pool of 100 workers against one of 4, the same
// work on both: 4 clients in a closed loop run one-node jobs (SlowNode of
// one 0 ms step) through Pool.Execute for 20 s; per job is the round trip
// of Execute (scheduling, /prompt, events, /history). The pools alternate
// in rounds so that the machine's load hits both alike.
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 20m -v -run TestBenchDispatchOverhead ./tests/fleet/
func TestBenchDispatchOverhead(t *testing.T) {
	requireBench(t)
	const clients, rounds = 4, 4
	round := 5 * time.Second
	type pool struct {
		n     int
		jobs  int64
		spent time.Duration
	}
	pools := []*pool{{n: 4}, {n: 100}}
	type started struct {
		run func(d time.Duration) (int64, time.Duration)
	}
	runners := map[int]started{}
	for _, p := range pools {
		peers, cp := startFleet(t, p.n)
		cp.Start()
		waitUntil(t, fmt.Sprint(p.n, " workers connected"), 30*time.Second, func() bool { return allConnected(peers, cp) })
		runners[p.n] = started{run: func(d time.Duration) (int64, time.Duration) {
			var jobs atomic.Int64
			var wg sync.WaitGroup
			stop := time.Now().Add(d)
			begin := time.Now()
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for time.Now().Before(stop) {
						if err := cp.Execute(context.Background(), trivialRun(t)); err != nil {
							t.Error(err)
							return
						}
						jobs.Add(1)
					}
				}()
			}
			wg.Wait()
			return jobs.Load(), time.Since(begin)
		}}
		runners[p.n].run(time.Second) // warm up
	}
	for range rounds {
		for _, p := range pools {
			n, d := runners[p.n].run(round)
			p.jobs += n
			p.spent += d
		}
	}
	per := func(p *pool) time.Duration { return p.spent * clients / time.Duration(p.jobs) }
	fmt.Printf("\n| workers | jobs | per job (%d clients) | ratio to 4 |\n|---|---|---|---|\n", clients)
	for _, p := range pools {
		fmt.Printf("| %d | %d | %.3f ms | %.2f |\n", p.n, p.jobs, float64(per(p))/1e6, float64(per(p))/float64(per(pools[0])))
	}
}
