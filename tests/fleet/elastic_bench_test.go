package fleet

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/fleet/provisioner"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// Bursty load (issue 29, acceptance 1): idle, a burst of burstJobs, idle,
// a second burst, idle; once on a pool at zero that the test provisioner
// scales (peers with a cold start), once on a fixed fleet sized for the
// burst, in one run.
const (
	burstJobs    = 200
	fleetSize    = 20
	jobSteps     = 10 // × jobStepMS: a 0.5 s job
	jobStepMS    = 50
	idleBefore   = 10 * time.Second
	idleBetween  = 30 * time.Second
	scaleDelay   = 5 * time.Second
	peerColdBoot = 3 * time.Second
	targetQueue  = 7 * time.Second
)

// burstResult is what one run measured.
type burstResult struct {
	workerTime      time.Duration
	p50, p95        time.Duration
	jobs, succeeded int
	prompts         int // over every peer: a job run twice shows here
	most            int
	backToZero      bool
	wall            time.Duration
}

// runBursts submits the two bursts around the idle periods and waits for
// them; idleAfter is called after each burst finished, to wait for the pool
// to go back to zero (the elastic run) or for the idle period.
func runBursts(t *testing.T, base string) (ids []string, lat []time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	for b := range 2 {
		if b == 0 {
			time.Sleep(idleBefore)
		} else {
			time.Sleep(idleBetween)
		}
		var mu sync.Mutex
		var wg sync.WaitGroup
		var burst []string
		sem := make(chan struct{}, 16)
		for i := range burstJobs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				id, err := submitJob(t, client, base, slowJob(jobSteps, jobStepMS, fmt.Sprintf("burst %d job %d", b, i)))
				if err != nil {
					t.Errorf("submit: %v", err)
					return
				}
				mu.Lock()
				burst = append(burst, id)
				mu.Unlock()
			}()
		}
		wg.Wait()
		done := waitAll(t, client, base, burst, 5*time.Minute)
		for _, id := range burst {
			j := done[id]
			if j.Status == "succeeded" && j.CompletedAt != nil {
				lat = append(lat, parseTime(t, *j.CompletedAt).Sub(parseTime(t, j.CreatedAt)))
			}
		}
		ids = append(ids, burst...)
	}
	return ids, lat
}

func succeededOf(t *testing.T, base string, ids []string) int {
	client := &http.Client{Timeout: time.Minute}
	n := 0
	for _, j := range waitAll(t, client, base, ids, time.Minute) {
		if j.Status == "succeeded" {
			n++
		}
	}
	return n
}

func promptsOf(peers []*comfyuipeer.Peer) int {
	n := 0
	for _, p := range peers {
		n += p.Stats().Prompts
	}
	return n
}

const benchPool = `
		jobs {
			lease 10s
			max_attempts 3
			max_queued 10000
		}
		pool gpu comfyui {
			%s
			unhealthy_after 10s
			reconnect_max 250ms
			dispatch least_busy
		}`

// TestBenchElasticBursts: see the constants above and BENCHMARKS.md.
func TestBenchElasticBursts(t *testing.T) {
	requireBench(t)
	var elastic, fixed burstResult

	t.Run("elastic", func(t *testing.T) {
		adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
		admin := "http://" + adminAddr
		// target_queue_time: the operator's latency budget for a burst's
		// last job is about twice what a fleet sized for it gives (~5 s of
		// drain): the 3 s cold start plus a queue drained in 7 s.
		g := gateway.Start(t, gateway.V2Config(`storage embedded ./data`+fmt.Sprintf(benchPool, fmt.Sprintf(`scale {
				max_workers %d
				scale_down_delay %s
				target_queue_time %s
			}`, fleetSize, scaleDelay, targetQueue)), gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
		prov := provisioner.Start(t, provisioner.Config{Admin: admin, Pool: "gpu",
			Peer: comfyuipeer.Options{ColdStart: peerColdBoot}, Poll: 100 * time.Millisecond})
		// Prime: a gateway that never saw a worker of the pool cannot
		// validate (503 + demand); one job brings the first worker, then
		// the pool goes back to zero. The measurement starts from there.
		client := &http.Client{Timeout: time.Minute}
		var prime string
		waitFor(t, "the priming job accepted", func() bool {
			id, err := submitJob(t, client, g.URL, slowJob(1, 0, "prime"))
			prime = id
			return err == nil
		})
		waitAll(t, client, g.URL, []string{prime}, time.Minute)
		atZero := func() bool {
			_, running, _, _, _ := prov.Stats()
			return running == 0 && len(adminWorkers(t, admin)) == 0
		}
		waitFor(t, "the pool back at zero after priming", atZero)
		used0, _, _, _, _ := prov.Stats()
		prompts0 := promptsOf(prov.Peers())

		start := time.Now()
		ids, lat := runBursts(t, g.URL)
		deadline := time.Now().Add(scaleDelay + 20*time.Second)
		for !atZero() && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		elastic.backToZero = atZero()
		elastic.wall = time.Since(start)
		used, _, most, _, _ := prov.Stats()
		elastic.workerTime = used - used0
		elastic.most = most
		elastic.jobs, elastic.succeeded = len(ids), succeededOf(t, g.URL, ids)
		elastic.prompts = promptsOf(prov.Peers()) - prompts0
		elastic.p50, elastic.p95 = percentile(lat, 50), percentile(lat, 95)
	})

	t.Run("fixed", func(t *testing.T) {
		peers := make([]*comfyuipeer.Peer, fleetSize)
		var lines []string
		for i := range peers {
			peers[i] = comfyuipeer.New(t, comfyuipeer.Options{})
			lines = append(lines, "worker "+peers[i].URL)
		}
		adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
		admin := "http://" + adminAddr
		g := gateway.Start(t, gateway.V2Config(`storage embedded ./data`+fmt.Sprintf(benchPool, strings.Join(lines, "\n\t\t\t")),
			gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
		waitFor(t, "the fleet healthy", func() bool {
			ws := adminWorkers(t, admin)
			for _, p := range peers {
				if !ws[p.URL].Healthy {
					return false
				}
			}
			return true
		})
		start := time.Now()
		ids, lat := runBursts(t, g.URL)
		time.Sleep(scaleDelay) // the same tail as the elastic run's wait for zero
		fixed.wall = time.Since(start)
		fixed.workerTime = time.Duration(fleetSize) * fixed.wall
		fixed.most = fleetSize
		fixed.jobs, fixed.succeeded = len(ids), succeededOf(t, g.URL, ids)
		fixed.prompts = promptsOf(peers)
		fixed.p50, fixed.p95 = percentile(lat, 50), percentile(lat, 95)
	})

	for _, r := range []struct {
		name string
		r    burstResult
	}{{"elastic", elastic}, {"fixed", fixed}} {
		t.Logf("%-7s worker-s %7.1f  p50 %6.2fs  p95 %6.2fs  jobs %d succeeded %d prompts %d  most workers %d  wall %.1fs  back to zero %v",
			r.name, r.r.workerTime.Seconds(), r.r.p50.Seconds(), r.r.p95.Seconds(), r.r.jobs, r.r.succeeded, r.r.prompts,
			r.r.most, r.r.wall.Seconds(), r.r.backToZero)
	}
	if fixed.workerTime > 0 && fixed.p95 > 0 {
		t.Logf("elastic/fixed: worker-seconds %.2f (goal ≤ 0.50), p95 %.2f (goal ≤ 2.00)",
			elastic.workerTime.Seconds()/fixed.workerTime.Seconds(), elastic.p95.Seconds()/fixed.p95.Seconds())
	}
	for _, r := range []burstResult{elastic, fixed} {
		if r.succeeded != r.jobs || r.prompts != r.jobs {
			t.Errorf("lost or duplicated: %d jobs, %d succeeded, %d prompts", r.jobs, r.succeeded, r.prompts)
		}
	}
	if !elastic.backToZero {
		t.Errorf("the elastic pool did not return to zero after the idle delay")
	}
}
