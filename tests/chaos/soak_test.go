package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// SoakPlotEnv names where the soak's PNG (and its CSV beside it) go.
const SoakPlotEnv = "COMFYGATE_CHAOS_SOAK_PLOT"

var (
	soakMu     sync.Mutex
	soakResult *SoakResult
)

// TestSoak runs the workload at a fixed moderate rate (two clients, 250 ms
// apart) against one gateway without faults, sampling the gateway's RSS,
// goroutines and open fds, its Postgres connections and the Redis keys
// every interval, then plots each series and checks that none grew after
// warm-up and that the checker finds nothing.
func TestSoak(t *testing.T) {
	length, interval, long := 24*time.Second, 2*time.Second, false
	if v := os.Getenv(SoakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", SoakEnv, err)
		}
		if d == 0 {
			t.Skip("the soak is off (" + SoakEnv + "=0); RELIABILITY.md keeps the last soak's section")
		}
		length, interval, long = d, 10*time.Second, true
	}
	s := NewStack(t, StackOptions{Admin: true})
	h := NewHistory()
	d := NewDriver(s, h)
	d.Pause = 250 * time.Millisecond
	ctx, stop := context.WithTimeout(context.Background(), length)
	defer stop()
	done := make(chan struct{})
	go func() { d.Run(ctx, 2); close(done) }()

	m := &Sampler{S: s, AdminPort: s.AdminPort}
	if err := m.Open(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var samples []Sample
	start := time.Now()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for ctx.Err() == nil {
		sm, err := m.Take(context.Background(), time.Since(start))
		if err != nil {
			t.Fatalf("sampling: %v", err)
		}
		samples = append(samples, sm)
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	<-done

	plotPath := os.Getenv(SoakPlotEnv)
	if plotPath == "" {
		plotPath = filepath.Join(t.TempDir(), "soak.png")
	}
	if err := Plot(samples, plotPath); err != nil {
		t.Fatalf("plot: %v", err)
	}
	if err := writeCSV(samples, strings.TrimSuffix(plotPath, ".png")+".csv"); err != nil {
		t.Fatal(err)
	}
	rep, err := Check(context.Background(), s, h)
	if err != nil {
		t.Fatal(err)
	}
	// Noise: 20 % of the warm level plus, per series, an absolute slack.
	grew := Growth(samples, 0.2, []float64{16, 25, 10, 2, 20})
	res := &SoakResult{Length: length, Interval: interval, Requests: rep.Requests, Samples: samples, Plot: plotPath, Grew: grew, Report: rep}
	soakMu.Lock()
	soakResult = res
	soakMu.Unlock()
	t.Logf("soak %s: %d samples, %d requests, codes %v, plot %s, grew %q", length, len(samples), rep.Requests, rep.Codes, plotPath, grew)
	if len(samples) < 8 {
		t.Errorf("only %d samples", len(samples))
	}
	for _, sm := range samples {
		if sm.RSS == 0 || sm.Goroutines == 0 || sm.FDs == 0 {
			t.Fatalf("a sample with a zero series: %+v", sm)
		}
	}
	if rep.Lost != 0 || rep.Duplicated != 0 || len(rep.Findings) != 0 {
		t.Errorf("checker: lost %d, duplicated %d, findings %q", rep.Lost, rep.Duplicated, rep.Findings)
	}
	if long && len(grew) > 0 {
		t.Errorf("series grew after warm-up: %q", grew)
	}
}

func writeCSV(samples []Sample, path string) error {
	var b strings.Builder
	b.WriteString("seconds,rss_mib,goroutines,fds,pg_conns,redis_keys,redis_claims\n")
	for _, s := range samples {
		fmt.Fprintf(&b, "%.0f,%.1f,%.0f,%.0f,%.0f,%.0f,%.0f\n", s.At.Seconds(), s.RSS, s.Goroutines, s.FDs, s.PGConns, s.RedisKeys, s.Claims)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
