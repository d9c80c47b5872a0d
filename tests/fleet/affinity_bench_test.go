package fleet

import (
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// benchModels are the six models; mix is the skewed share of each.
var (
	benchModels = []string{"m0.safetensors", "m1.safetensors", "m2.safetensors", "m3.safetensors", "m4.safetensors", "m5.safetensors"}
	benchMix    = []float64{0.35, 0.25, 0.15, 0.12, 0.08, 0.05}
)

// envInt reads a knob of the bench.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envFloat(name string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(name), 64); err == nil && v > 0 {
		return v
	}
	return def
}

// affinityRun is one policy's measurement.
type affinityRun struct {
	p50, p95, mean time.Duration
	loads          int
	busy           float64 // mean fraction of the span the workers executed
	failed         int
	span           time.Duration
}

// runAffinity starts 8 fresh peers (each with 2 of the 6 models warm) and a
// gateway with the given dispatch, sends the same Poisson arrivals of jobs
// over the skewed mix, and measures created → completed per job.
func runAffinity(t *testing.T, dispatch string, n int, rate float64, cold time.Duration, steps, stepMS int) affinityRun {
	var peers []*comfyuipeer.Peer
	var workers strings.Builder
	for i := range 8 {
		p := comfyuipeer.New(t, comfyuipeer.Options{Models: benchModels, ModelLoad: cold, ModelSlots: 2,
			Warm: []string{benchModels[i%6], benchModels[(i+1)%6]}})
		peers = append(peers, p)
		fmt.Fprintf(&workers, "\t\t\tworker %s\n", p.URL)
	}
	g := gateway.Start(t, gateway.V2Config(`storage embedded ./data
		jobs {
			max_queued 10000
		}
		pool gpu comfyui {
`+workers.String()+`			dispatch `+dispatch+`
			affinity_models 2
		}`, gateway.V2Site{Pool: "gpu"}), gateway.Options{})
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	// Warm the gateway's catalog before the clock starts.
	if _, err := submitJob(t, client, g.URL, modelWorkflow(benchModels[0], 1, 0)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	base := make([]comfyuipeer.Stats, len(peers))
	for i, p := range peers {
		base[i] = p.Stats()
	}
	rng := rand.New(rand.NewPCG(16, 16)) // the same arrivals and mix for both policies
	ids := make([]string, n)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	start := time.Now()
	next := start
	for i := range n {
		if d := time.Until(next); d > 0 {
			time.Sleep(d)
		}
		u, m := rng.Float64(), 0
		for acc := benchMix[0]; u > acc && m < len(benchMix)-1; acc += benchMix[m] {
			m++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := submitJob(t, client, g.URL, modelWorkflow(benchModels[m], steps, stepMS))
			mu.Lock()
			defer mu.Unlock()
			ids[i] = id
			if err != nil {
				errs = append(errs, err)
			}
		}()
		next = next.Add(time.Duration(rng.ExpFloat64() / rate * float64(time.Second)))
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d submissions failed, first: %v", len(errs), errs[0])
	}
	jobs := waitAll(t, client, g.URL, ids, 30*time.Minute)
	span := time.Since(start)
	var res affinityRun
	var lat []time.Duration
	var sum time.Duration
	for _, j := range jobs {
		if j.Status != "succeeded" || j.CompletedAt == nil {
			res.failed++
			continue
		}
		d := parseTime(t, *j.CompletedAt).Sub(parseTime(t, j.CreatedAt))
		lat = append(lat, d)
		sum += d
	}
	res.p50, res.p95 = percentile(lat, 50), percentile(lat, 95)
	if len(lat) > 0 {
		res.mean = sum / time.Duration(len(lat))
	}
	var busy time.Duration
	for i, p := range peers {
		st := p.Stats()
		res.loads += st.ModelLoads - base[i].ModelLoads
		busy += st.Busy - base[i].Busy
	}
	res.busy = float64(busy) / float64(span) / float64(len(peers))
	res.span = span
	g.Stop()
	return res
}

// TestBenchAffinity is acceptance 1 of issue 16: latency with affinity vs
// least-busy dispatch over the same arrivals.
//
//	COMFYGATE_BENCH=1 go test -count=1 -timeout 60m -v -run TestBenchAffinity ./tests/fleet/
//
// Knobs: FLEET_JOBS (400), FLEET_RATE (jobs/s), FLEET_COLD_MS (2000),
// FLEET_STEPS × FLEET_STEP_MS (the warm execution, 10 × 80 ms).
func TestBenchAffinity(t *testing.T) {
	requireBench(t)
	n := envInt("FLEET_JOBS", 400)
	cold := time.Duration(envInt("FLEET_COLD_MS", 2000)) * time.Millisecond
	steps, stepMS := envInt("FLEET_STEPS", 10), envInt("FLEET_STEP_MS", 80)
	rate := envFloat("FLEET_RATE", 2.6)
	results := map[string]affinityRun{}
	for _, dispatch := range []string{"least_busy", "affinity"} {
		r := runAffinity(t, dispatch, n, rate, cold, steps, stepMS)
		results[dispatch] = r
		t.Logf("%s: p50 %v p95 %v mean %v, %d model loads, workers %.0f%% busy, %d failed, %v",
			dispatch, r.p50, r.p95, r.mean, r.loads, r.busy*100, r.failed, r.span.Round(time.Second))
	}
	lb, af := results["least_busy"], results["affinity"]
	fmt.Printf("\n| dispatch | p50 | p95 | mean | model loads | workers busy | failed |\n|---|---|---|---|---|---|---|\n")
	for _, name := range []string{"least_busy", "affinity"} {
		r := results[name]
		fmt.Printf("| %s | %.2f s | %.2f s | %.2f s | %d | %.0f %% | %d |\n", name, r.p50.Seconds(), r.p95.Seconds(),
			r.mean.Seconds(), r.loads, r.busy*100, r.failed)
	}
	fmt.Printf("\np50 least_busy/affinity = %.2f×, p95 = %.2f×\n", lb.p50.Seconds()/af.p50.Seconds(), lb.p95.Seconds()/af.p95.Seconds())
	if lb.failed+af.failed > 0 {
		t.Errorf("%d jobs did not succeed", lb.failed+af.failed)
	}
}
