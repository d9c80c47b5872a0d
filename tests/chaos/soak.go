package chaos

import (
	"bufio"
	"context"
	"fmt"
	"image/color"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Sample is one soak measurement of the gateway and its dependencies.
type Sample struct {
	At time.Duration
	// RSS in MiB, goroutines, open file descriptors of the gateway;
	// PGConns its Postgres connections; RedisKeys the keys of its
	// database except the idempotency claims, which Claims counts: a claim
	// lives 24 h by design, so they grow with the requests of a soak.
	RSS, Goroutines, FDs, PGConns, RedisKeys float64
	Claims                                   float64
}

// Series names the Sample fields, in plot order.
var Series = []string{"RSS (MiB)", "goroutines", "open fds", "postgres connections", "redis keys (without idempotency claims)"}

func (s Sample) values() []float64 {
	return []float64{s.RSS, s.Goroutines, s.FDs, s.PGConns, s.RedisKeys}
}

// Sampler measures one gateway of a stack.
type Sampler struct {
	S         *Stack
	AdminPort int
	conn      *pgx.Conn
	redis     *redis.Client
}

// Take reads every series once.
func (m *Sampler) Take(ctx context.Context, at time.Duration) (Sample, error) {
	pid := m.S.Gateways[0].PID()
	s := Sample{At: at, RSS: float64(rss(pid)) / (1 << 20)}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return s, err
	}
	s.FDs = float64(len(fds))
	if s.Goroutines, err = m.goroutines(ctx); err != nil {
		return s, err
	}
	var n int64
	if err := m.conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, m.S.AppName).Scan(&n); err != nil {
		return s, err
	}
	s.PGConns = float64(n)
	if n, err = m.redis.DBSize(ctx).Result(); err != nil {
		return s, err
	}
	var claims int
	iter := m.redis.Scan(ctx, 0, "*claim:*", 1000).Iterator()
	for iter.Next(ctx) {
		claims++
	}
	if err := iter.Err(); err != nil {
		return s, err
	}
	s.RedisKeys, s.Claims = float64(n)-float64(claims), float64(claims)
	return s, nil
}

// goroutines reads go_goroutines from the gateway's admin /metrics.
func (m *Sampler) goroutines(ctx context.Context) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", m.AdminPort), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no go_goroutines in /metrics")
}

// Open connects the sampler to Postgres and Redis directly.
func (m *Sampler) Open(ctx context.Context) error {
	var err error
	if m.conn, err = pgx.Connect(ctx, m.S.DSN); err != nil {
		return err
	}
	opts, err := redis.ParseURL(m.S.RedisURL)
	if err != nil {
		return err
	}
	m.redis = redis.NewClient(opts)
	return nil
}

// Close releases the sampler's connections.
func (m *Sampler) Close() {
	if m.conn != nil {
		m.conn.Close(context.Background())
	}
	if m.redis != nil {
		m.redis.Close()
	}
}

// Growth compares, per series, the mean of the samples of the second
// quarter (after warm-up) with that of the last quarter, and reports the
// series that grew by more than tolerance (a fraction) plus slack (an
// absolute amount for counts that hover near zero).
func Growth(samples []Sample, tolerance float64, slack []float64) []string {
	n := len(samples)
	if n < 8 {
		return nil
	}
	mean := func(from, to, i int) float64 {
		var sum float64
		for _, s := range samples[from:to] {
			sum += s.values()[i]
		}
		return sum / float64(to-from)
	}
	var grew []string
	for i, name := range Series {
		early, late := mean(n/4, n/2, i), mean(3*n/4, n, i)
		if late > early*(1+tolerance)+slack[i] {
			grew = append(grew, fmt.Sprintf("%s grew from %.1f to %.1f", name, early, late))
		}
	}
	return grew
}

// Plot draws each series over time, one panel per series, into a PNG.
func Plot(samples []Sample, path string) error {
	const w, h = 8 * vg.Inch, 12 * vg.Inch
	img := vgimg.New(w, h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(Series), Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	for i, name := range Series {
		p := plot.New()
		p.Title.Text = name
		p.X.Label.Text = "minutes"
		pts := make(plotter.XYs, len(samples))
		for j, s := range samples {
			pts[j].X, pts[j].Y = s.At.Minutes(), s.values()[i]
		}
		line, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		line.Color = color.RGBA{B: 200, A: 255}
		p.Add(line)
		p.Y.Min = 0
		p.Draw(tiles.At(dc, 0, i))
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// SoakResult is the soak's outcome for RELIABILITY.md.
type SoakResult struct {
	Length, Interval time.Duration
	Requests         int
	Samples          []Sample
	Plot             string
	Grew             []string
	Report           Report
}

// SoakEnv sets the soak's length (a Go duration, "30m" for the long form;
// "0" skips it); without it the soak runs as a 24 s smoke test of its
// sampling and plot.
const SoakEnv = "COMFYGATE_CHAOS_SOAK"

// rss reads a process's resident set in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			var kb int64
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
			return kb << 10
		}
	}
	return 0
}
