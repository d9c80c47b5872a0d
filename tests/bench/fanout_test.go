package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redisbus"
)

// raiseFDLimit lifts this process's open-file limit to its hard limit;
// gateways the test starts inherit it. (The product's defaults are left
// alone: this is the benchmark's own setting.)
func raiseFDLimit(t *testing.T) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l); err != nil {
		t.Fatal(err)
	}
	t.Logf("open-file limit %d", l.Cur)
}

// TestBenchStreamFanout: 1,000 event streams of one job on an API-only
// Postgres+Redis gateway; progress events are published on the Redis bus
// from this process (as a dispatcher in another gateway process publishes
// them), 20 of them 250 ms apart, and each stream's delay from the
// publication to the end of the event's frame is recorded: p50/p99/max over
// all 20,000 deliveries.
//
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchStreamFanout ./tests/bench/
func TestBenchStreamFanout(t *testing.T) {
	requireBench(t)
	raiseFDLimit(t)
	n := envInt("COMFYGATE_BENCH_FANOUT", 1000)
	const events = 20
	dsn, rurl := pgtest.DSN(t), pgtest.RedisURL(t)
	g, _ := startGateway(t, apiOnlyGlobal(dsn, rurl, fmt.Sprintf("\t\t\tmax_streams %d\n", n+10)))
	ids := submitJobs(t, benchClient(4), g.URL, 1, submitBody(chainWorkflow(1)))
	conns := openConns(t, g, n, eventStream(ids))

	pub, err := redisbus.New(rurl, "comfygate:")
	if err != nil {
		t.Fatal(err)
	}
	defer pub.Close()
	var sent [events]atomic.Int64 // publication times, unix ns
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func(c net.Conn) {
			defer wg.Done()
			c.SetReadDeadline(time.Now().Add(time.Duration(events)*250*time.Millisecond + 10*time.Second))
			br := bufio.NewReader(c)
			var k int
			inProgress := false
			for got := 0; got < events; {
				line, err := br.ReadString('\n')
				if err != nil {
					return
				}
				line = strings.TrimRight(line, "\r\n")
				switch {
				case line == "event: progress":
					inProgress = true
				case inProgress && strings.HasPrefix(line, "data:"):
					var d struct{ Value int }
					json.Unmarshal([]byte(strings.TrimSpace(strings.TrimPrefix(line, "data:"))), &d)
					k = d.Value
				case inProgress && line == "":
					inProgress = false
					if k >= 0 && k < events && sent[k].Load() > 0 {
						el := time.Duration(time.Now().UnixNano() - sent[k].Load())
						mu.Lock()
						lat = append(lat, el)
						mu.Unlock()
					}
					got++
				}
			}
		}(c)
	}
	time.Sleep(time.Second)
	for k := range events {
		data, _ := json.Marshal(map[string]any{"node_id": "2", "value": k, "max": events})
		sent[k].Store(time.Now().UnixNano())
		if err := pub.Publish(context.Background(), bus.Event{JobID: ids[0], Kind: "progress", Data: data}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond)
	}
	wg.Wait()
	want := n * events
	t.Logf("\n%d streams of one job, %d progress events published on the Redis bus: %d of %d deliveries seen\n"+
		"| p50 | p90 | p99 | max |\n| %s | %s | %s | %s |", n, events, len(lat), want,
		ms(Percentile(lat, 50)), ms(Percentile(lat, 90)), ms(Percentile(lat, 99)), ms(Percentile(lat, 100)))
	if len(lat) < want {
		t.Errorf("%d deliveries missing", want-len(lat))
	}
}
