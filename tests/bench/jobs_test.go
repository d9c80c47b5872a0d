package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/peers/otlp"
)

// apiOnlyGlobal is a Postgres+Redis gateway that queues jobs but runs none,
// so submitted jobs stay queued.
func apiOnlyGlobal(dsn, redisURL string, extra string) string {
	return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\tblobs file_system ./data/blobs\n\t\tjobs {\n\t\t\tno_execute\n\t\t\tmax_queued 10000000\n%s\t\t}",
		dsn, redisURL, extra)
}

// chainWorkflow is EmptyImage → n alternating flips/inverts → SaveImage, a
// valid graph of n+2 nodes for validation to walk.
func chainWorkflow(n int) []byte {
	wf := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}}}
	prev := "1"
	for i := 2; i <= n+1; i++ {
		id := fmt.Sprint(i)
		if i%2 == 0 {
			wf[id] = map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{prev, 0}}}
		} else {
			wf[id] = map[string]any{"class_type": "ImageFlip", "inputs": map[string]any{"image": []any{prev, 0}, "flip_method": "x-axis: vertically"}}
		}
		prev = id
	}
	wf["900"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "bench", "images": []any{prev, 0}}}
	b, _ := json.Marshal(wf)
	return b
}

func submitBody(wf []byte) []byte {
	return []byte(`{"workflow":` + string(wf) + `}`)
}

func benchClient(conns int) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conns, MaxIdleConnsPerHost: conns, IdleConnTimeout: time.Minute}}
}

// post sends one submit with a fresh Idempotency-Key and returns the status
// and body.
func post(client *http.Client, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// closedLoop runs op from conc goroutines for d and returns ops/s and the
// number of failed ops.
func closedLoop(conc int, d time.Duration, op func() error) (float64, int64) {
	var ok, failed atomic.Int64
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < conc; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				if op() == nil {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(ok.Load()) / time.Since(start).Seconds(), failed.Load()
}

// TestBenchSubmitThroughput: jobs/s of POST /api/v2/jobs (validation,
// idempotency key, durable insert) from 16 concurrent clients on an API-only
// Postgres+Redis gateway, against bare pgx INSERTs of an equivalent row at
// the same concurrency into a copy of the jobs table in the same schema,
// and against bare pgx running the gateway's own create transaction
// (queue advisory lock + insert + queue count).
//
// The gateway is driven twice per round: by the raw HTTP/1.1 client
// (rawclient.go; "gateway", the figure the goal is judged on) and by Go's
// net/http client ("gateway (net/http client)", the generator used before),
// which costs the shared CPUs more per request.
//
// COMFYGATE_BENCH_BASE_BIN adds a gateway of another binary on the same
// schema, driven by the raw client as "gateway@base" in the same rounds: an
// A/B of two builds in one run. COMFYGATE_BENCH_TARGETS (comma-separated)
// keeps only the targets named ("gateway" and "bare insert" always run).
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchSubmitThroughput ./tests/bench/
func TestBenchSubmitThroughput(t *testing.T) {
	requireBench(t)
	const conc = 16
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 3)
	dur := time.Duration(envInt("COMFYGATE_BENCH_SECONDS", 5)) * time.Second
	dsn := pgtest.DSN(t)
	// COMFYGATE_BENCH_TRACING=1 turns tracing on (100 % sampling) in
	// "gateway" only, exporting to an OTLP receiver in this process; with
	// COMFYGATE_BENCH_BASE_BIN naming the same binary, "gateway@base" is
	// the same build with tracing off, in the same rounds.
	global, env := apiOnlyGlobal(dsn, pgtest.RedisURL(t), ""), []string(nil)
	var spans *otlp.Receiver
	if os.Getenv("COMFYGATE_BENCH_TRACING") != "" {
		spans = otlp.StartCounter(t)
		global += "\n\t\ttracing"
		// The batch processor at its default pace, as in production.
		env = append(spans.Env(), "OTEL_TRACES_SAMPLER=always_on", "OTEL_BSP_SCHEDULE_DELAY=5000")
	}
	g, gwPID := startGateway(t, global, env...)
	wf := chainWorkflow(10)
	body := submitBody(wf)

	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = conc
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, tbl := range []string{"bench_jobs", "bench_jobs_tx"} {
		if _, err := pool.Exec(ctx, "CREATE TABLE "+tbl+" (LIKE jobs INCLUDING ALL)"); err != nil {
			t.Fatal(err)
		}
	}
	expires := time.Now().Add(24 * time.Hour)
	insert := func(tbl string) error {
		_, err := pool.Exec(ctx, `INSERT INTO `+tbl+` (id, account_id, pool, status, workflow, expires_at, idempotency_key)
			VALUES ($1, 'local', 'builtin', 'queued', $2::text::json, $3, $4)`,
			uuid.NewString(), string(wf), expires, uuid.NewString())
		return err
	}
	// The gateway's CreateJob transaction, minus HTTP, validation and Redis.
	createTx := func() error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('bench_jobs_tx'))`); err != nil {
			return err
		}
		if err := insertTx(ctx, tx.Exec, wf, expires); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM bench_jobs_tx WHERE pool = 'builtin' AND status = 'queued'`).Scan(&n); err != nil {
			return err
		}
		return tx.Commit(ctx)
	}
	client := benchClient(conc)
	url := g.URL + "/api/v2/jobs"
	var firstErr atomic.Value
	submitOp := func() error {
		code, b, err := post(client, url, body)
		if err == nil && code != http.StatusCreated {
			err = fmt.Errorf("status %d: %s", code, b)
		}
		if err != nil {
			firstErr.CompareAndSwap(nil, err.Error())
		}
		return err
	}
	// "gateway" is driven by the raw HTTP/1.1 client (rawclient.go), the
	// lighter load generator; "gateway (net/http client)" by Go's client as
	// before, so both stay comparable in one run.
	raw := newRawSubmitter(strings.TrimPrefix(g.URL, "http://"), "/api/v2/jobs", body, conc)
	rawOp := func() error {
		err := raw.submit()
		if err != nil {
			firstErr.CompareAndSwap(nil, err.Error())
		}
		return err
	}
	// Warm up connections on both sides.
	closedLoop(conc, 500*time.Millisecond, submitOp)
	closedLoop(conc, 500*time.Millisecond, rawOp)
	closedLoop(conc, 500*time.Millisecond, func() error { return insert("bench_jobs") })

	targets := []string{"gateway", "bare insert", "gateway (net/http client)", "bare create tx"}
	ops := map[string]func() error{"gateway": rawOp, "gateway (net/http client)": submitOp,
		"bare insert": func() error { return insert("bench_jobs") }, "bare create tx": createTx}
	pids := map[string]int{"gateway": gwPID}
	if bin := os.Getenv("COMFYGATE_BENCH_BASE_BIN"); bin != "" {
		bg, bPID := startGatewayBin(t, bin, apiOnlyGlobal(dsn, pgtest.RedisURL(t), ""))
		braw := newRawSubmitter(strings.TrimPrefix(bg.URL, "http://"), "/api/v2/jobs", body, conc)
		ops["gateway@base"] = func() error {
			err := braw.submit()
			if err != nil {
				firstErr.CompareAndSwap(nil, err.Error())
			}
			return err
		}
		closedLoop(conc, 500*time.Millisecond, ops["gateway@base"])
		targets = append(targets, "gateway@base")
		pids["gateway@base"] = bPID
	}
	if only := os.Getenv("COMFYGATE_BENCH_TARGETS"); only != "" {
		names := append(strings.Split(only, ","), "gateway", "bare insert")
		targets = slices.DeleteFunc(targets, func(n string) bool { return !slices.Contains(names, n) })
	}
	rate := map[string][]float64{}
	var ratios, ratiosHTTP, ratiosTx, ratiosBase []float64
	gwCPU := map[string][]float64{}
	for r := 0; r < rounds; r++ {
		quiet(t)
		got := map[string]float64{}
		for i := range targets {
			name := targets[(i+r)%len(targets)]
			pid, isGateway := pids[name]
			c0, _ := CPUTicks(pid)
			perSec, failed := closedLoop(conc, dur, ops[name])
			if c1, err := CPUTicks(pid); err == nil && isGateway && perSec > 0 {
				// Ticks are 10 ms: µs of gateway CPU per created job.
				gwCPU[name] = append(gwCPU[name], float64(c1-c0)*1e4/(perSec*dur.Seconds()))
			}
			if failed > 0 {
				t.Logf("%s: %d failed ops (first: %v)", name, failed, firstErr.Load())
			}
			got[name] = perSec
			rate[name] = append(rate[name], perSec)
		}
		ratios = append(ratios, got["gateway"]/got["bare insert"])
		ratiosHTTP = append(ratiosHTTP, got["gateway (net/http client)"]/got["bare insert"])
		ratiosTx = append(ratiosTx, got["gateway"]/got["bare create tx"])
		ratiosBase = append(ratiosBase, got["gateway@base"]/got["bare insert"])
		var line strings.Builder
		for _, name := range targets {
			fmt.Fprintf(&line, ", %s %.0f/s", name, got[name])
		}
		t.Logf("round %d%s", r+1, line.String())
	}
	var queued int
	pool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE status = 'queued'`).Scan(&queued)
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nsubmit, %d clients, %d rounds × %s, workflow %d bytes; %d jobs queued at the end\n", conc, rounds, dur, len(wf), queued)
	for _, name := range targets {
		xs := rate[name]
		fmt.Fprintf(&sb, "| %s | %.0f/s [%.0f–%.0f] |\n", name, Median(xs), slicesMin(xs), slicesMax(xs))
	}
	ratio := func(name string, xs []float64) {
		if slices.Contains(targets, name) {
			fmt.Fprintf(&sb, "| %s / bare insert | %.2f [%.2f–%.2f] |\n", name, Median(xs), slicesMin(xs), slicesMax(xs))
		}
	}
	ratio("gateway", ratios)
	ratio("gateway (net/http client)", ratiosHTTP)
	ratio("gateway@base", ratiosBase)
	if slices.Contains(targets, "bare create tx") {
		fmt.Fprintf(&sb, "| gateway / bare create tx | %.2f [%.2f–%.2f] |\n", Median(ratiosTx), slicesMin(ratiosTx), slicesMax(ratiosTx))
	}
	for _, name := range []string{"gateway", "gateway@base"} {
		if xs := gwCPU[name]; len(xs) > 0 {
			fmt.Fprintf(&sb, "| %s CPU per job (raw client) | %.0f µs [%.0f–%.0f] |\n", name, Median(xs), slicesMin(xs), slicesMax(xs))
		}
	}
	if spans != nil {
		fmt.Fprintf(&sb, "| OTLP bytes exported by gateway (tracing on) | %d |\n", spans.Count())
	}
	t.Log(sb.String())
}

func insertTx[R any](ctx context.Context, exec func(context.Context, string, ...any) (R, error), wf []byte, expires time.Time) error {
	_, err := exec(ctx, `INSERT INTO bench_jobs_tx (id, account_id, pool, status, workflow, expires_at, idempotency_key)
		VALUES ($1, 'local', 'builtin', 'queued', $2::text::json, $3, $4) RETURNING id`,
		uuid.NewString(), string(wf), expires, uuid.NewString())
	return err
}

// TestBenchGetJobLatency: GET /api/v2/jobs/{id} of a queued job at a fixed
// open-loop rate, against a trivial Go handler returning a body of the same
// bytes, in alternating rounds.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchGetJobLatency ./tests/bench/
func TestBenchGetJobLatency(t *testing.T) {
	requireBench(t)
	rate := envInt("COMFYGATE_BENCH_RATE", 1000)
	dur := time.Duration(envInt("COMFYGATE_BENCH_SECONDS", 10)) * time.Second
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 3)
	g, pid := startGateway(t, apiOnlyGlobal(pgtest.DSN(t), pgtest.RedisURL(t), ""))
	client := benchClient(256)
	code, b, err := post(client, g.URL+"/api/v2/jobs", submitBody(chainWorkflow(10)))
	if err != nil || code != http.StatusCreated {
		t.Fatalf("submit: %d %s %v", code, b, err)
	}
	var job struct{ ID string }
	json.Unmarshal(b, &job)
	jobURL := g.URL + "/api/v2/jobs/" + job.ID
	resp, err := client.Get(jobURL)
	if err != nil {
		t.Fatal(err)
	}
	jobBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	bodyFile := filepath.Join(t.TempDir(), "job.json")
	os.WriteFile(bodyFile, jobBody, 0o600)
	urls := map[string]string{"gateway": jobURL,
		"baseline": startServer(t, "static-json", "COMFYGATE_BENCH_BODY="+bodyFile) + "/job"}

	var sb strings.Builder
	fmt.Fprintf(&sb, "\nGET job (%d-byte body), open loop %d req/s for %s per round, latency from the scheduled send\n", len(jobBody), rate, dur)
	sb.WriteString("| round | target | p50 | p90 | p99 | max | errors | late sends | gateway CPU/req |\n")
	for r := 0; r < rounds; r++ {
		quiet(t)
		for i, name := range []string{"gateway", "baseline"} {
			if r%2 == 1 {
				name = []string{"baseline", "gateway"}[i]
			}
			OpenLoop(context.Background(), client, urls[name], rate, time.Second) // warm-up
			c0, _ := CPUTicks(pid)
			res := OpenLoop(context.Background(), client, urls[name], rate, dur)
			c1, _ := CPUTicks(pid)
			cpu := "–"
			if name == "gateway" {
				cpu = fmt.Sprintf("%.0f µs", float64(c1-c0)*1e4/float64(len(res.Latencies)+res.Errors))
			}
			l := res.Latencies
			fmt.Fprintf(&sb, "| %d | %s | %s | %s | %s | %s | %d | %d | %s |\n", r+1, name,
				ms(Percentile(l, 50)), ms(Percentile(l, 90)), ms(Percentile(l, 99)), ms(Percentile(l, 100)),
				res.Errors, res.Late, cpu)
		}
	}
	t.Log(sb.String())
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
