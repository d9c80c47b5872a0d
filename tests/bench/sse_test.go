package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// openConns opens n raw connections to g with at most 64 in flight, each
// set up by open, and returns them (closed when the test ends).
func openConns(t *testing.T, g *gateway.Gateway, n int, open func(c net.Conn, br *bufio.Reader, i int) error) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	sem := make(chan struct{}, 64)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", g.Port))
			if err == nil {
				c.SetDeadline(time.Now().Add(60 * time.Second))
				err = open(c, bufio.NewReader(c), i)
				c.SetDeadline(time.Time{})
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("connection %d: %w", i, err)
			}
			conns[i] = c
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	return conns
}

// keepAlive does one GET of path and leaves the connection idle, open.
func keepAlive(path string) func(net.Conn, *bufio.Reader, int) error {
	return func(c net.Conn, br *bufio.Reader, _ int) error {
		if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", path); err != nil {
			return err
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
}

// eventStream opens the events of ids[i%len] and reads up to the end of the
// first (snapshot) event, then leaves the stream idle.
func eventStream(ids []string) func(net.Conn, *bufio.Reader, int) error {
	return func(c net.Conn, br *bufio.Reader, i int) error {
		if _, err := fmt.Fprintf(c, "GET /api/v2/jobs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ids[i%len(ids)]); err != nil {
			return err
		}
		status, err := br.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.Contains(status, " 200 ") {
			rest, _ := br.Peek(br.Buffered())
			return fmt.Errorf("%s%s", status, rest)
		}
		sawData := false
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return err
			}
			line = strings.TrimRight(line, "\r\n")
			if strings.HasPrefix(line, "data:") || strings.Contains(line, "data:") {
				sawData = true
			}
			if sawData && line == "" {
				return nil
			}
		}
	}
}

// submitJobs submits n jobs from 16 clients and returns their ids.
func submitJobs(t *testing.T, client *http.Client, base string, n int, body []byte) []string {
	t.Helper()
	ids := make([]string, n)
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				code, b, err := post(client, base+"/api/v2/jobs", body)
				if err != nil || code != http.StatusCreated {
					t.Errorf("submit: %d %s %v", code, b, err)
					continue
				}
				var j struct{ ID string }
				json.Unmarshal(b, &j)
				ids[i] = j.ID
			}
		}()
	}
	for i := 0; i < n; i++ {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return ids
}

// TestBenchIdleStreamMemory: RSS per idle SSE stream with 5 000 streams open
// on queued jobs (API-only gateway, Postgres+Redis), against the RSS of a
// twin gateway holding 5 000 idle keep-alive connections, so the stream's
// own overhead is isolated. Also the gateway's CPU use while they idle.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchIdleStreamMemory ./tests/bench/
func TestBenchIdleStreamMemory(t *testing.T) {
	requireBench(t)
	n := envInt("COMFYGATE_BENCH_STREAMS", 5000)
	const jobsCount = 500
	dsn, rurl := pgtest.DSN(t), pgtest.RedisURL(t)
	extra := fmt.Sprintf("\t\t\tmax_streams %d\n", n+100)
	client := benchClient(16)

	type result struct {
		rss               int64   // KiB
		cpu               float64 // percent of one core while idle
		heap, stacks, gcs int     // MB growth of the live heap and scannable stacks, GCs seen
	}
	measure := func(name string, open func(g *gateway.Gateway, ids []string) []net.Conn) result {
		// gctrace splits the growth into live heap and goroutine stacks.
		g, pid := startGateway(t, apiOnlyGlobal(dsn, rurl, extra), "GODEBUG=gctrace=1")
		ids := submitJobs(t, client, g.URL, jobsCount, submitBody(chainWorkflow(1)))
		// Warm both paths once, then let the process settle.
		openConns(t, g, 4, eventStream(ids))[0].Close()
		openConns(t, g, 4, keepAlive("/api/v2/jobs/"+ids[0]))[0].Close()
		time.Sleep(3 * time.Second)
		rss0 := mustKB(t, pid, "VmRSS")
		heap0, stacks0, _ := lastGC(g.Logs())
		conns := open(g, ids)
		time.Sleep(5 * time.Second) // a few reconcile periods
		rss1 := mustKB(t, pid, "VmRSS")
		c0, _ := CPUTicks(pid)
		time.Sleep(10 * time.Second)
		c1, _ := CPUTicks(pid)
		rss2 := mustKB(t, pid, "VmRSS")
		for _, c := range conns {
			c.Close()
		}
		heap1, stacks1, gcs := lastGC(g.Logs())
		t.Logf("%s: VmRSS %d KiB before, %d KiB after 5 s, %d KiB after 15 s with %d open; live heap %d→%d MB, stacks %d→%d MB",
			name, rss0, rss1, rss2, n, heap0, heap1, stacks0, stacks1)
		g.Stop()
		// CPU ticks are 10 ms; over 10 s, ticks/10 is percent of one core.
		return result{rss: max(rss1, rss2) - rss0, cpu: float64(c1-c0) / 10,
			heap: heap1 - heap0, stacks: stacks1 - stacks0, gcs: gcs}
	}
	quiet(t)
	ka := measure("keep-alive", func(g *gateway.Gateway, ids []string) []net.Conn {
		return openConns(t, g, n, keepAlive("/api/v2/jobs/"+ids[0]))
	})
	quiet(t)
	sse := measure("sse", func(g *gateway.Gateway, ids []string) []net.Conn {
		return openConns(t, g, n, eventStream(ids))
	})
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%d idle connections on %d queued jobs (RSS growth; live heap and stack growth from gctrace)\n", n, jobsCount)
	sb.WriteString("| connections | RSS growth | per connection | live heap growth | stack growth | gateway CPU while idle |\n")
	row := func(name string, r result) {
		fmt.Fprintf(&sb, "| %s | +%.1f MiB | %.1f KiB | +%d MB | +%d MB | %.0f%% of a core |\n",
			name, float64(r.rss)/1024, float64(r.rss)/float64(n), r.heap, r.stacks, r.cpu)
	}
	row("idle keep-alive", ka)
	row("idle SSE streams", sse)
	fmt.Fprintf(&sb, "| SSE − keep-alive | | %.1f KiB | | | |\n", float64(sse.rss-ka.rss)/float64(n))
	t.Log(sb.String())
}

var gcLine = regexp.MustCompile(`gc \d+ @[^\n]*? (\d+)->(\d+)->(\d+) MB, \d+ MB goal, (\d+) MB stacks`)

// lastGC returns the live heap and scannable stack sizes (MB) of the last
// gctrace line in logs, and how many GC lines there are.
func lastGC(logs string) (heap, stacks, count int) {
	all := gcLine.FindAllStringSubmatch(logs, -1)
	if len(all) == 0 {
		return 0, 0, 0
	}
	m := all[len(all)-1]
	heap, _ = strconv.Atoi(m[3])
	stacks, _ = strconv.Atoi(m[4])
	return heap, stacks, len(all)
}
