package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
)

const benchConsoleToken = "bench-console-token-0123456789"

// consoleGateway is a Postgres gateway that serves the console and runs no
// jobs (seeded ones keep their state).
func consoleGateway(t *testing.T, dsn string) *gateway.Gateway {
	t.Helper()
	return gateway.Start(t, `{
	admin off
	comfygate {
		storage postgres "`+dsn+`"
		blobs file_system ./data/blobs
		jobs {
			no_execute
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	handle_path /console/* {
		comfy_console {
			token `+benchConsoleToken+`
		}
	}
}
`, gateway.Options{})
}

// seedJobs writes n jobs over 100 accounts straight into storage: about
// four in five end succeeded (claimed and finished), the rest stay queued.
func seedJobs(t *testing.T, dsn string, n int) {
	t.Helper()
	ctx := context.Background()
	st, err := postgres.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	wf := chainWorkflow(6)
	var wg sync.WaitGroup
	jobs := make(chan int)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				pool := "builtin"
				if i%5 == 4 {
					pool = "other" // stays queued: no dispatcher claims it
				}
				_, err := st.CreateJob(ctx, storage.NewJob{ID: uuid.NewString(), AccountID: fmt.Sprintf("acct-%03d", i%100),
					Pool: pool, Workflow: wf, ExpiresAt: time.Now().Add(24 * time.Hour)})
				if err != nil {
					t.Error(err)
					continue // keep draining: the sender must not block
				}
				if pool != "builtin" {
					continue
				}
				// Another seeder may have claimed this one: finish whichever
				// comes, and leave the rest queued.
				j, err := st.ClaimJob(ctx, pool, "seed", time.Minute, 0, func(blob.Ref) error { return nil })
				if err == nil {
					_, err = st.FinishJob(ctx, j.ID, j.Attempt, storage.JobSucceeded, nil)
				}
				if err != nil && !errors.Is(err, storage.ErrNotFound) {
					t.Error(err)
				}
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// TestBenchConsoleLoad: the console page, from navigation to a rendered
// first page of jobs and the pools, against a store of 10,000 jobs and an
// empty one (the baseline), in the same run, in headless Chromium.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchConsoleLoad ./tests/bench/
func TestBenchConsoleLoad(t *testing.T) {
	requireBench(t)
	const rounds = 15
	stores := []struct {
		name string
		jobs int
	}{{"empty", 0}, {"10,000 jobs", 10000}}
	type site struct {
		g     *gateway.Gateway
		times []time.Duration
	}
	sites := make([]*site, len(stores))
	for i, s := range stores {
		dsn := pgtest.DSN(t)
		g := consoleGateway(t, dsn)
		start := time.Now()
		seedJobs(t, dsn, s.jobs)
		if s.jobs > 0 {
			t.Logf("seeded %d jobs in %s", s.jobs, time.Since(start).Round(time.Millisecond))
		}
		sites[i] = &site{g: g}
	}
	ctx := browser.New(t, browser.Options{})
	// The credential in the tab's sessionStorage, as after a sign-in, for
	// each origin.
	for _, s := range sites {
		if err := chromedp.Do(ctx, chromedp.Navigate(s.g.URL+"/console/")); err != nil {
			t.Fatal(err)
		}
		if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](
			fmt.Sprintf(`(sessionStorage.setItem("comfygate-console-token", %q), true)`, benchConsoleToken))); err != nil {
			t.Fatal(err)
		}
	}
	for range rounds {
		quiet(t)
		for i, s := range sites {
			want := min(stores[i].jobs, 25)
			ready := fmt.Sprintf(`document.querySelector("#pools .card") !== null && document.getElementById("page").textContent !== "" && document.querySelectorAll("#jobs tbody tr").length === %d`, want)
			start := time.Now()
			if err := chromedp.Do(ctx, chromedp.Navigate(s.g.URL+"/console/")); err != nil {
				t.Fatal(err)
			}
			wait, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err := chromedp.Run(wait, chromedp.Poll[bool](ready, chromedp.WithPollingInterval(5*time.Millisecond)))
			cancel()
			if err != nil {
				t.Fatalf("%s: the console did not render: %v", stores[i].name, err)
			}
			s.times = append(s.times, time.Since(start))
		}
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	worst := func(d []time.Duration) time.Duration { return slices.Max(d) }
	base := median(sites[0].times)
	rows := []map[string]any{}
	for i, s := range sites {
		m := median(s.times)
		rows = append(rows, map[string]any{"store": stores[i].name, "median": ms(m), "worst": ms(worst(s.times)),
			"ratio": fmt.Sprintf("%.2f", float64(m)/float64(base))})
		if stores[i].jobs > 0 && m >= time.Second {
			t.Errorf("the console loads in %s (median) with %s; the goal is < 1 s", m, stores[i].name)
		}
	}
	out, _ := json.MarshalIndent(rows, "", "  ")
	t.Logf("console page load, %d rounds each, navigation to the first page of jobs rendered:\n%s", rounds, out)
}
