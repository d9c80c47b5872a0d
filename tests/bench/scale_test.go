package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/apikey"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/tests/bench/seed"
	"github.com/comfygate/comfygate/tests/gateway"
)

// scaleStore is one seeded store for TestBenchScale: the gateway's
// comfygate block for it, and the store itself for the store-level parts
// (claims, the reaper's sweeps) and setup.
type scaleStore struct {
	global string
	st     storage.Store
	// due marks up to n of the oldest queued or succeeded jobs (with
	// their outputs) past retention and returns how many.
	due func(n int) (int, error)
	// restore undoes a round's writes (see restoreSQL).
	restore func() error
	// pending counts the rows the reaper has left to do: jobs not yet
	// expired past retention, and expired assets.
	pending func() (int, error)
	seed    seed.Stats
}

func postgresScale(t *testing.T, n int) scaleStore {
	ctx := context.Background()
	dsn := pgtest.DSN(t)
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := seed.Postgres(ctx, st.Pool(), seed.Plan{Jobs: n})
	if err != nil {
		t.Fatal(err)
	}
	return scaleStore{global: apiOnlyGlobal(dsn, pgtest.RedisURL(t), "\t\t\tmax_streams 2000\n"), st: st, seed: stats,
		due: func(k int) (int, error) {
			tag, err := st.Pool().Exec(ctx, `WITH d AS (SELECT id FROM jobs WHERE status IN ('queued', 'succeeded')
					ORDER BY created_at LIMIT $1),
				a AS (UPDATE assets SET expires_at = now() - interval '1 minute'
					WHERE job_id IN (SELECT id FROM d))
				UPDATE jobs SET expires_at = now() - interval '1 minute' WHERE id IN (SELECT id FROM d)`, k)
			return int(tag.RowsAffected()), err
		},
		restore: func() error {
			for _, q := range restoreSQL {
				if _, err := st.Pool().Exec(ctx, q); err != nil {
					return err
				}
			}
			_, err := st.Pool().Exec(ctx, `VACUUM ANALYZE jobs`) // what autovacuum would do, now, for both sizes
			return err
		},
		pending: func() (int, error) {
			var n int
			err := st.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM jobs WHERE status IN ('queued', 'running', 'canceling')
				AND expires_at < now()) + (SELECT count(*) FROM assets WHERE expires_at < now())`).Scan(&n)
			return n, err
		}}
}

func embeddedScale(t *testing.T, n int) scaleStore {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := embedded.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err := seed.SQLite(ctx, st.Path(), seed.Plan{Jobs: n})
	if err != nil {
		t.Fatal(err)
	}
	global := fmt.Sprintf("storage embedded %q\n\t\tblobs file_system %q\n\t\tjobs {\n\t\t\tno_execute\n\t\t\tmax_queued 10000000\n\t\t\tmax_streams 2000\n\t\t}",
		dir, filepath.Join(dir, "blobs"))
	return scaleStore{global: global, st: st, seed: stats,
		due:     func(k int) (int, error) { return embeddedDue(ctx, st.Path(), k) },
		restore: func() error { return embeddedRestore(ctx, st.Path()) },
		pending: func() (int, error) { return embeddedPending(ctx, st.Path()) }}
}

// Accounts and claim owner of the bench's own writes.
const (
	submitAccount = "bench-submit"
	claimOwner    = "bench"
)

// restoreSQL undoes what a round wrote, so that every round (and the
// small store above all: at 5,000 submissions a second a round adds 25,000
// jobs to a 10,000-job store) measures the store as seeded: the jobs the
// round submitted go, and the queued jobs its claimers took are queued
// again as they were (the stores' triggers keep the queued counts).
var restoreSQL = []string{
	`DELETE FROM jobs WHERE account_id = '` + submitAccount + `'`,
	`UPDATE jobs SET status = 'queued', attempt = attempt - 1, lease_owner = NULL, lease_expires_at = NULL,
		started_at = NULL, attempt_started_at = NULL WHERE lease_owner = '` + claimOwner + `' AND status = 'running'`,
}

// scaleResult is one size's figures.
type scaleResult struct {
	submitRate                          float64
	submitP99, getP99, headP99, hashP99 time.Duration
	list                                map[string]time.Duration // p99 by page
	claimRate                           float64
	swept                               int
	sweepRate                           float64
	submitP99Quiet, submitP99Sweep      time.Duration
}

// authed adds a bearer token to every request.
type authed struct {
	token string
	rt    http.RoundTripper
}

func (a authed) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.token)
	return a.rt.RoundTrip(r)
}

func clientFor(token string, conns int) *http.Client {
	c := benchClient(conns)
	c.Transport = authed{token, c.Transport}
	return c
}

// timed runs op from conc goroutines for d and returns ops/s and the
// latencies of the successful ones.
func timed(conc int, d time.Duration, op func() error) (float64, []time.Duration) {
	var mu sync.Mutex
	var lat []time.Duration
	rate, _ := closedLoop(conc, d, func() error {
		t0 := time.Now()
		err := op()
		if err == nil {
			el := time.Since(t0)
			mu.Lock()
			lat = append(lat, el)
			mu.Unlock()
		}
		return err
	})
	return rate, lat
}

// sequential runs op k times in a row and returns its p99.
func sequential(t *testing.T, k int, op func() error) time.Duration {
	t.Helper()
	return Percentile(latencies(t, k, op), 99)
}

// latencies runs op k times in a row and returns how long each took.
func latencies(t *testing.T, k int, op func() error) []time.Duration {
	t.Helper()
	lat := make([]time.Duration, 0, k)
	for range k {
		t0 := time.Now()
		if err := op(); err != nil {
			t.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat
}

func expect(client *http.Client, method, u string, body []byte, want int) ([]byte, error) {
	req, err := http.NewRequest(method, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Idempotency-Key", uuid.NewString())
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != want {
		err = fmt.Errorf("%s %s: %d %s", method, u, resp.StatusCode, b)
	}
	return b, err
}

// cursorAt walks an account's list to depth and returns the cursor there.
func cursorAt(client *http.Client, base string, depth int) (string, error) {
	cursor := ""
	for seen := 0; seen < depth; seen += 100 {
		u := base + "/api/v2/jobs?limit=100"
		if cursor != "" {
			u += "&cursor=" + url.QueryEscape(cursor)
		}
		b, err := expect(client, http.MethodGet, u, nil, http.StatusOK)
		if err != nil {
			return "", err
		}
		var page struct {
			NextCursor string `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil || page.NextCursor == "" {
			return cursor, err
		}
		cursor = page.NextCursor
	}
	return cursor, nil
}

// scaleEnv is a seeded store with its gateway and what the figures use.
type scaleEnv struct {
	s      scaleStore
	g      *gateway.Gateway
	raw    *rawSubmitter
	busy   *http.Client
	getURL string
	lists  map[string]struct {
		c   *http.Client
		url string
	}
	dedup    *http.Client
	headURL  string
	fromHash []byte
}

const scaleConc = 16

// prepareScale starts a gateway on s and finds what the figures read: the
// busy account's last queued job, cursors half-way through the busy and a
// quiet account's jobs, an uploaded asset.
func prepareScale(t *testing.T, s scaleStore) *scaleEnv {
	ctx := context.Background()
	token := func(acct string) string {
		_, tok, err := apikey.Create(ctx, s.st, acct, "bench")
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	e := &scaleEnv{s: s, lists: map[string]struct {
		c   *http.Client
		url string
	}{}}
	e.g = gateway.Start(t, gateway.V2Config(s.global, gateway.V2Site{Auth: "comfy_auth api_keys"}), gateway.Options{})
	e.raw = newRawSubmitter(strings.TrimPrefix(e.g.URL, "http://"), "/api/v2/jobs", submitBody(chainWorkflow(10)), scaleConc)
	e.raw.prefix = bytes.Replace(e.raw.prefix, []byte("Idempotency-Key: "),
		[]byte("Authorization: Bearer "+token(submitAccount)+"\r\nIdempotency-Key: "), 1)
	busyTok := token(seed.BusyAccount)
	e.busy = clientFor(busyTok, 256)
	queued, err := s.st.ListJobs(ctx, seed.BusyAccount, storage.JobQuery{Limit: 1, Statuses: []string{storage.JobQueued}})
	if err != nil || len(queued) == 0 {
		t.Fatalf("no queued job of the busy account: %v", err)
	}
	e.getURL = e.g.URL + "/api/v2/jobs/" + queued[0].ID // its newest: the back of its queue
	for _, a := range []struct {
		name, acct, tok string
		total           int
	}{{"busy", seed.BusyAccount, busyTok, s.seed.Jobs / 10}, {"quiet", seed.QuietAccount, token(seed.QuietAccount), seed.QuietJobs}} {
		c := clientFor(a.tok, 4)
		cur, err := cursorAt(c, e.g.URL, a.total/2)
		if err != nil {
			t.Fatal(err)
		}
		first := e.g.URL + "/api/v2/jobs?limit=100"
		e.lists[a.name+" first"] = struct {
			c   *http.Client
			url string
		}{c, first}
		e.lists[a.name+" deep"] = struct {
			c   *http.Client
			url string
		}{c, first + "&cursor=" + url.QueryEscape(cur)}
	}
	upAcct, upPath := seed.Upload(seed.Plan{Jobs: s.seed.Jobs})
	up, err := s.st.FindAssetByPath(ctx, upAcct, upPath)
	if err != nil {
		t.Fatal(err)
	}
	e.dedup = clientFor(token(upAcct), 4)
	e.headURL = e.g.URL + "/api/v2/assets/by-hash/" + up.Hash
	e.fromHash, _ = json.Marshal(map[string]any{"hash": up.Hash, "file_path": up.FilePath})
	timed(scaleConc, time.Second, e.raw.submit) // warm-up
	return e
}

// measureRound takes one round of the figures that leave the store as
// they found it (but for the jobs submitted and claimed).
func measureRound(t *testing.T, e *scaleEnv, dur time.Duration) scaleResult {
	ctx := context.Background()
	r := scaleResult{list: map[string]time.Duration{}}
	var lat []time.Duration
	r.submitRate, lat = timed(scaleConc, dur, e.raw.submit)
	r.submitP99 = Percentile(lat, 99)

	OpenLoop(ctx, e.busy, e.getURL, 1000, time.Second)
	res := OpenLoop(ctx, e.busy, e.getURL, 1000, dur)
	if res.Errors > 0 {
		t.Logf("GET job: %d errors", res.Errors)
	}
	r.getP99 = Percentile(res.Latencies, 99)

	for name, l := range e.lists {
		r.list[name] = sequential(t, 600, func() error { _, err := expect(l.c, "GET", l.url, nil, 200); return err })
	}
	r.headP99 = sequential(t, 1000, func() error {
		_, err := expect(e.dedup, http.MethodHead, e.headURL, nil, 200)
		return err
	})
	r.hashP99 = sequential(t, 1000, func() error {
		_, err := expect(e.dedup, http.MethodPost, e.g.URL+"/api/v2/assets/from-hash", e.fromHash, 200)
		return err
	})
	// Claims: four claimers on the store, as dispatchers do (2 s: the
	// small store's queue must not run dry).
	r.claimRate, _ = closedLoop(4, 2*time.Second, func() error {
		_, err := e.s.st.ClaimJob(ctx, "builtin", claimOwner, time.Minute, 0, func(blob.Ref) error { return nil })
		return err
	})
	return r
}

// measureReaper makes up to 100,000 jobs due and sweeps them while the
// clients submit: submit p99 just before and during the sweep.
func measureReaper(t *testing.T, e *scaleEnv, dur time.Duration) scaleResult {
	ctx := context.Background()
	s := e.s
	var r scaleResult
	// The p99 without a sweep first: once rows are due the gateway's own
	// asset sweep (every minute) may start on them.
	_, lat := timed(scaleConc, dur, e.raw.submit)
	r.submitP99Quiet = Percentile(lat, 99)
	due, err := s.due(100_000)
	if err != nil {
		t.Fatal(err)
	}
	sweepCtx, stop := context.WithTimeout(ctx, time.Duration(envInt("COMFYGATE_SCALE_SWEEP_SECONDS", 120))*time.Second)
	defer stop()
	sweepDone := make(chan struct{})
	before, err := s.pending()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	// The longest single statement of each sweep: how long it held the
	// store (on the embedded store, its single writer).
	var longestExpire, longestAssets time.Duration
	longest := func(d *time.Duration, op func() (int, error)) (int, error) {
		t0 := time.Now()
		n, err := op()
		*d = max(*d, time.Since(t0))
		return n, err
	}
	go func() {
		defer close(sweepDone)
		// Sweep passes as the gateway's loops make them, until nothing is
		// left (the gateway's own asset sweep may take a share);
		// COMFYGATE_SCALE_REAPER_BATCH sets their batch size.
		cfg := jobs.SweepConfig{Batch: envInt("COMFYGATE_SCALE_REAPER_BATCH", 0)}
		for sweepCtx.Err() == nil {
			_, err := cfg.Drain(sweepCtx, func(ctx context.Context, limit int) (int, error) {
				return longest(&longestExpire, func() (int, error) {
					j, err := s.st.ExpireJobs(ctx, time.Now(), time.Now().Add(-2*time.Hour), limit)
					return len(j), err
				})
			})
			if err == nil {
				_, err = cfg.Drain(sweepCtx, func(ctx context.Context, limit int) (int, error) {
					return longest(&longestAssets, func() (int, error) {
						return s.st.DeleteExpiredAssets(ctx, time.Now(), limit, func(blob.Ref) error { return nil })
					})
				})
			}
			if err != nil && sweepCtx.Err() == nil {
				t.Errorf("sweep: %v", err)
				return
			}
			if left, err := s.pending(); err != nil || left == 0 {
				return
			}
		}
	}()
	lat = nil
	for {
		_, l := timed(scaleConc, time.Second, e.raw.submit)
		lat = append(lat, l...)
		select {
		case <-sweepDone:
		default:
			continue
		}
		break
	}
	took := time.Since(t0)
	after, err := s.pending()
	if err != nil {
		t.Fatal(err)
	}
	r.swept = before - after
	r.sweepRate = float64(r.swept) / took.Seconds()
	r.submitP99Sweep = Percentile(lat, 99)
	t.Logf("sweep: %d due jobs; %d rows to do (due jobs not terminal + expired assets), %d done in %s; longest batch: jobs %s, assets %s",
		due, before, r.swept, took.Round(time.Millisecond), longestExpire.Round(time.Millisecond), longestAssets.Round(time.Millisecond))
	return r
}

func sizes(env, def string) []int {
	v := os.Getenv(env)
	if v == "" {
		v = def
	}
	var out []int
	for _, f := range strings.Split(v, ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}
