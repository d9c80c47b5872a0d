package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/otlp"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestRouterOverheadBenchmark measures, in one run and against one
// constant-time peer, (a) the peer directly, (b) Caddy's plain reverse_proxy
// and (c) model_router with JWT auth, schema validation, Redis limits and a
// Postgres usage record. It is a measurement, not a check: it runs only
// with ROUTER_BENCH=1 and prints a table. With ROUTER_BENCH_BASE_BIN it
// also compares (c) with the base binary's, paired request by request at
// c=1 for ROUTER_BENCH_PAIRED (10s); ROUTER_BENCH_ROUNDS=0 runs only that.
//
//	ROUTER_BENCH=1 go test -count=1 -run TestRouterOverheadBenchmark -v ./tests/router/
func TestRouterOverheadBenchmark(t *testing.T) {
	if os.Getenv("ROUTER_BENCH") == "" {
		t.Skip("set ROUTER_BENCH=1 to run the router overhead benchmark")
	}
	peerURL, peerPID := startPeerProcess(t)
	inProcess := partner.NewConstant(t)
	dir := t.TempDir()
	catalogPath := filepath.Join(dir, "catalog.json")
	models := []model{{ID: "bench/constant", Adapter: "http", Upstream: peerURL + "/v1/generate", Credential: "k",
		Schema: inputSchema, Price: 1, Deadline: "30s"}}
	if err := os.WriteFile(catalogPath, catalogJSON(t, models), 0o600); err != nil {
		t.Fatal(err)
	}
	proxyPort := gateway.FreePort(t)
	adminPort := gateway.FreePort(t)
	prefix := pgtest.KeyPrefix(t)
	// ROUTER_BENCH_TRACING=1 turns tracing on (100 % sampling) in the main
	// gateway only, exporting to an OTLP receiver in this process; with
	// ROUTER_BENCH_BASE_BIN naming the same binary, @base is the same
	// build with tracing off, in the same rounds.
	tracingLine, tracingEnv := "", []string(nil)
	var spans *otlp.Receiver
	if os.Getenv("ROUTER_BENCH_TRACING") != "" {
		spans = otlp.StartCounter(t)
		// The batch processor at its default pace, as in production.
		tracingLine, tracingEnv = "\n\t\ttracing", append(spans.Env(), "OTEL_TRACES_SAMPLER=always_on", "OTEL_BSP_SCHEDULE_DELAY=5000")
	}
	cfg := gateway.RouterConfig(fmt.Sprintf("storage postgres %q\n\t\tredis %q", pgtest.DSN(t), pgtest.RedisURL(t))+tracingLine,
		gateway.RouterSite{Admin: fmt.Sprintf("127.0.0.1:%d", adminPort), JWTSecret: jwtSecret, Catalog: catalogPath,
			Options: []string{"redis_prefix " + prefix, "max_in_flight 1000", "spend_ceiling_cents 100000"}})
	cfg += fmt.Sprintf(`
http://:%d {
	bind 127.0.0.1
	reverse_proxy %s
}
`, proxyPort, strings.TrimPrefix(peerURL, "http://"))
	gwEnv := strings.Fields(os.Getenv("ROUTER_BENCH_GATEWAY_ENV"))
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir, Env: append(slices.Clone(gwEnv), tracingEnv...)})
	// ROUTER_BENCH_BASE_BIN: a second gateway of another binary (same
	// catalog and limits, keys of its own, no proxy site) is measured in the
	// same rounds as (c)@base and (c')@base: an A/B of two builds in one run.
	var base *gateway.Gateway
	basePrefix := prefix + "base:"
	if bin := os.Getenv("ROUTER_BENCH_BASE_BIN"); bin != "" {
		baseCfg := gateway.RouterConfig(fmt.Sprintf("storage postgres %q\n\t\tredis %q", pgtest.DSN(t), pgtest.RedisURL(t)),
			gateway.RouterSite{JWTSecret: jwtSecret, Catalog: catalogPath,
				Options: []string{"redis_prefix " + basePrefix, "max_in_flight 1000", "spend_ceiling_cents 100000"}})
		base = gateway.Start(t, baseCfg, gateway.Options{Env: gwEnv, Binary: bin})
	}
	workspaces := []string{"ws-bench", "ws-bench-2"}
	jsonHdr := []http.Header{{"Content-Type": {"application/json"}}}
	bearer := func(ws string) http.Header {
		return http.Header{"Content-Type": {"application/json"}, "Authorization": {"Bearer " + token(t, claims{ws: ws})}}
	}
	// Each worker sends its requests with hdrs[0], hdrs[1], ... in turn.
	targets := []target{
		{"(a) direct to peer", peerURL + "/v1/generate", jsonHdr},
		{"(b) caddy reverse_proxy", fmt.Sprintf("http://127.0.0.1:%d/v1/generate", proxyPort), jsonHdr},
		{"(c) model_router", g.URL + "/v1/models/bench/constant", []http.Header{bearer(workspaces[0])}},
		// For comparison with tables taken before the peer had a process
		// of its own: the same peer inside the load generator's process.
		{"(a0) direct to an in-process peer", inProcess.URL + "/v1/generate", jsonHdr},
		// (c) with every admission sent to Redis: consecutive calls come
		// from two workspaces in turn, so a settling call's slot is never
		// the next call's to take over (see limits.Redis.handOver).
		{"(c') model_router, two workspaces in turn", g.URL + "/v1/models/bench/constant",
			[]http.Header{bearer(workspaces[0]), bearer(workspaces[1])}},
	}
	// Targets named by index: (b), (c), (a0) and (c'); then the base
	// binary's (c) and (c').
	const proxy, viaRouter, inProcessPeer, viaRedis, baseRouter, baseRedis = 1, 2, 3, 4, 5, 6
	router := []int{viaRouter, viaRedis}
	if base != nil {
		targets = append(targets, targets[viaRouter], targets[viaRedis])
		targets[baseRouter].name, targets[baseRouter].url = "(c) model_router @base", base.URL+"/v1/models/bench/constant"
		targets[baseRedis].name, targets[baseRedis].url = "(c') two workspaces in turn @base", base.URL+"/v1/models/bench/constant"
		router = append(router, baseRouter, baseRedis)
	}
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxIdleConns: 512}}
	for _, tg := range targets { // warm up connections, scripts and caches
		if _, _, err := load(hc, tg.url, tg.hdrs, 4, 300*time.Millisecond); err != nil {
			t.Fatalf("%s: %v", tg.name, err)
		}
	}
	if path := os.Getenv("ROUTER_BENCH_ALLOCS"); path != "" {
		// Allocation profiles of the gateway before and after 3 s of (c) at
		// c=32: go tool pprof -sample_index=alloc_space -base path.0 path.1
		for i := range 2 {
			if i == 1 {
				_, _, _ = load(hc, targets[viaRouter].url, targets[viaRouter].hdrs, 32, 3*time.Second)
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/allocs", adminPort))
			if err != nil {
				t.Fatalf("allocs profile: %v", err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			_ = os.WriteFile(fmt.Sprintf("%s.%d", path, i), b, 0o644)
		}
	}
	if path := os.Getenv("ROUTER_BENCH_PROFILE"); path != "" {
		// A CPU profile of the gateway under (c) at c=32 (c=1 with
		// ROUTER_BENCH_PROFILE_C1 set; (b) with ROUTER_BENCH_PROFILE_B), for
		// go tool pprof.
		done := make(chan struct{})
		go func() {
			defer close(done)
			kind := "profile"
			if os.Getenv("ROUTER_BENCH_TRACE") != "" { // an execution trace instead: go tool trace
				kind = "trace"
			}
			resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s?seconds=4", adminPort, kind))
			if err != nil {
				t.Errorf("profile: %v", err)
				return
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			_ = os.WriteFile(path, b, 0o644)
		}()
		c := 32
		if os.Getenv("ROUTER_BENCH_PROFILE_C1") != "" {
			c = 1
		}
		target := viaRouter
		if os.Getenv("ROUTER_BENCH_PROFILE_B") != "" { // Caddy's reverse_proxy instead, to compare
			target = 1
		}
		_, _, _ = load(hc, targets[target].url, targets[target].hdrs, c, 5*time.Second)
		<-done
	}
	// ROUTER_BENCH_ROUNDS=0 leaves only the paired measurement (below).
	rounds := 3
	if v, err := strconv.Atoi(os.Getenv("ROUTER_BENCH_ROUNDS")); err == nil && v >= 0 {
		rounds = v
	}
	p50 := make([][]time.Duration, len(targets))
	p99 := make([][]time.Duration, len(targets))
	rps := make([][]float64, len(targets))
	groups := benchGroups(g.Dir, peerPID)
	if base != nil {
		groups = append(groups, cpuGroup{"gateway@base", func(pid int, _ string) bool {
			d, err := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "cwd"))
			return err == nil && d == base.Dir
		}})
	}
	// cpu[i][j]: CPU µs per request of group j (the last: whole machine)
	// under target i at c=32, one value per round.
	cpu := make([][][]float64, len(targets))
	for i := range cpu {
		cpu[i] = make([][]float64, len(groups)+1)
	}
	// Per request of each target: EVALSHAs at c=1 (evalsha1) and at c=32
	// (evalsha32), and the µs Redis spent in them at c=32. gw1[i]: CPU µs
	// per request at c=1 of the gateway serving target i.
	evalsha1 := make([][]float64, len(targets))
	evalsha32 := make([][]float64, len(targets))
	redisUsec := make([][]float64, len(targets))
	gw1 := make([][]float64, len(targets))
	servedBy := func(i int) int { // the CPU group of the gateway serving target i
		if i >= baseRouter {
			return len(groups) - 1
		}
		return 0
	}
	for range rounds { // interleaved rounds, median of the rounds
		for i, tg := range targets {
			rs := redisScriptStats(t) // before the CPU sample: its INFO is not the target's work
			before := sampleCPU(groups)
			lat, _, err := load(hc, tg.url, tg.hdrs, 1, 2*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			p50[i] = append(p50[i], pct(lat, 50))
			p99[i] = append(p99[i], pct(lat, 99))
			per, _ := perRequest(before, sampleCPU(groups), float64(len(lat)))
			gw1[i] = append(gw1[i], per[servedBy(i)])
			evalsha1[i] = append(evalsha1[i], (redisScriptStats(t).calls-rs.calls)/float64(len(lat)))
			rs = redisScriptStats(t)
			before = sampleCPU(groups)
			lat, r, err := load(hc, tg.url, tg.hdrs, 32, 2*time.Second)
			if err != nil {
				t.Fatalf("%s: %v", tg.name, err)
			}
			per, machine := perRequest(before, sampleCPU(groups), float64(len(lat)))
			after := redisScriptStats(t)
			evalsha32[i] = append(evalsha32[i], (after.calls-rs.calls)/float64(len(lat)))
			redisUsec[i] = append(redisUsec[i], (after.usec-rs.usec)/float64(len(lat)))
			for j, v := range append(per, machine) {
				cpu[i][j] = append(cpu[i][j], v)
			}
			rps[i] = append(rps[i], r)
		}
	}
	med := func(d []time.Duration) time.Duration { slices.Sort(d); return d[len(d)/2] }
	medf := func(f []float64) float64 { slices.Sort(f); return f[len(f)/2] }
	var out strings.Builder
	if rounds > 0 {
		fmt.Fprintf(&out, "\n| target | p50 c=1 | p99 c=1 | added p50 vs (a) | req/s c=32 |\n|---|---|---|---|---|\n")
		a50 := med(p50[0])
		for i, tg := range targets {
			m50 := med(p50[i])
			fmt.Fprintf(&out, "| %s | %v | %v | %v | %.0f |\n", tg.name, m50.Round(time.Microsecond), med(p99[i]).Round(time.Microsecond),
				(m50 - a50).Round(time.Microsecond), medf(rps[i]))
		}
		fmt.Fprintf(&out, "\nthroughput (c)/(b) = %.2f, (c')/(b) = %.2f; added p50 (c)-(a) = %v ((c)-(a0) = %v), (c')-(a) = %v; Redis round trips per admitted call: at most %d (Admit + Settle; +1 per lease_ttl/3 a call lasts), fewer when concurrent calls share them or a slot is handed over (below)\n",
			medf(rps[viaRouter])/medf(rps[proxy]), medf(rps[viaRedis])/medf(rps[proxy]), (med(p50[viaRouter]) - a50).Round(time.Microsecond),
			(med(p50[viaRouter]) - med(p50[inProcessPeer])).Round(time.Microsecond), (med(p50[viaRedis]) - a50).Round(time.Microsecond),
			limits.RoundTrips(0, 0))
		if base != nil {
			fmt.Fprintf(&out, "@base: throughput (c)/(b) = %.2f, (c')/(b) = %.2f; added p50 (c)-(a) = %v, (c')-(a) = %v\n",
				medf(rps[baseRouter])/medf(rps[proxy]), medf(rps[baseRedis])/medf(rps[proxy]),
				(med(p50[baseRouter]) - a50).Round(time.Microsecond), (med(p50[baseRedis]) - a50).Round(time.Microsecond))
		}
		fmt.Fprintf(&out, "\nCPU µs per request at c=32 (median of rounds; machine = all busy CPU time, both vCPUs):\n| target |")
		for _, gr := range groups {
			fmt.Fprintf(&out, " %s |", gr.name)
		}
		fmt.Fprintf(&out, " machine |\n|---|%s\n", strings.Repeat("---|", len(groups)+1))
		for i, tg := range targets {
			fmt.Fprintf(&out, "| %s |", tg.name)
			for j := range cpu[i] {
				fmt.Fprintf(&out, " %.0f |", medf(cpu[i][j]))
			}
			out.WriteString("\n")
		}
		fmt.Fprintf(&out, "\n| per request | gateway CPU µs at c=1 | EVALSHA at c=1 | EVALSHA at c=32 | Redis µs in them at c=32 |\n|---|---|---|---|---|\n")
		for _, i := range append([]int{proxy}, router...) {
			fmt.Fprintf(&out, "| %s | %.0f | %.2f | %.2f | %.1f |\n", targets[i].name, medf(gw1[i]), medf(evalsha1[i]), medf(evalsha32[i]), medf(redisUsec[i]))
		}
		out.WriteString("(EVALSHA per request is Redis round trips per request when every call is of one workspace; INFO commandstats counts any other client of the server too)\n")
	}
	if base != nil {
		// Paired at c=1: one request to each of (a), (c) and (c)@base in
		// turn, in a new random order each cycle, so that the three see the
		// same moments of the machine; the rounds above give each target
		// its own 2 s, which a busy neighbour can tilt by more than the
		// difference measured.
		d := 10 * time.Second
		if v, err := time.ParseDuration(os.Getenv("ROUTER_BENCH_PAIRED")); err == nil {
			d = v
		}
		if rounds > 0 {
			// Let the rounds' c=32 load settle (a traced gateway exports
			// the spans it queued then) before the paired cycles.
			time.Sleep(2 * time.Second)
		}
		paired, err := loadPaired(hc, []target{targets[0], targets[viaRouter], targets[baseRouter]}, d)
		if err != nil {
			t.Fatalf("paired: %v", err)
		}
		a, c, cb := pct(paired[0], 50), pct(paired[1], 50), pct(paired[2], 50)
		fmt.Fprintf(&out, "\npaired c=1 (%v, %d cycles): p50 (a) %v, (c) %v, (c)@base %v; added p50 (c)-(a) = %v, @base %v: ratio %.3f; p99 (c) %v, (c)@base %v\n",
			d, len(paired[0]), a.Round(time.Microsecond), c.Round(time.Microsecond), cb.Round(time.Microsecond),
			(c - a).Round(time.Microsecond), (cb - a).Round(time.Microsecond), float64(c-a)/float64(cb-a),
			pct(paired[1], 99).Round(time.Microsecond), pct(paired[2], 99).Round(time.Microsecond))
	}
	if spans != nil {
		fmt.Fprintf(&out, "OTLP bytes exported by the main gateway (tracing on): %d\n", spans.Count())
	}
	t.Log(out.String())
	prefixes := []string{prefix}
	if base != nil {
		prefixes = append(prefixes, basePrefix)
	}
	for _, p := range prefixes {
		l := g2limiter(t, p)
		for _, ws := range workspaces {
			eventually(t, 10*time.Second, "limiter counters of "+p+ws+" back to zero", func() bool {
				n, cents, err := l.Inspect(context.Background(), ws)
				return err == nil && n == 0 && cents == 0
			})
		}
	}
}

func g2limiter(t *testing.T, prefix string) limits.Limiter {
	l, err := limits.OpenRedis(pgtest.RedisURL(t), prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// load runs a closed loop of c workers for d against url and returns every
// latency and the request rate. Each worker sends its requests with the
// headers of hdrs in turn. Any non-200 answer is an error.
func load(hc *http.Client, url string, hdrs []http.Header, c int, d time.Duration) ([]time.Duration, float64, error) {
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 4096)
			for n := 0; time.Now().Before(end); n++ {
				d, err := call1(hc, url, hdrs[n%len(hdrs)])
				if err != nil {
					mu.Lock()
					firstErr = err
					mu.Unlock()
					return
				}
				lat = append(lat, d)
			}
			mu.Lock()
			all = append(all, lat...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return all, float64(len(all)) / time.Since(start).Seconds(), firstErr
}

// call1 sends the prompt to url with hdr and reads the answer; its
// latency, or an error for a failure or any status but 200.
func call1(hc *http.Client, url string, hdr http.Header) (time.Duration, error) {
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(prompt))
	req.Header = hdr.Clone()
	t0 := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err == nil && resp.StatusCode != 200 {
		err = fmt.Errorf("status %d", resp.StatusCode)
	}
	return time.Since(t0), err
}

// target is a URL the benchmark loads and the headers of its requests.
type target struct {
	name, url string
	hdrs      []http.Header
}

// loadPaired sends one request at a time for d, one to each of targets
// per cycle in a new random order, and returns each target's latencies.
func loadPaired(hc *http.Client, targets []target, d time.Duration) ([][]time.Duration, error) {
	lat := make([][]time.Duration, len(targets))
	order := make([]int, len(targets))
	for i := range order {
		order[i] = i
	}
	for n, end := 0, time.Now().Add(d); time.Now().Before(end); n++ {
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, i := range order {
			tg := targets[i]
			d, err := call1(hc, tg.url, tg.hdrs[n%len(tg.hdrs)])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", tg.name, err)
			}
			lat[i] = append(lat[i], d)
		}
	}
	return lat, nil
}

func pct(lat []time.Duration, p int) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
