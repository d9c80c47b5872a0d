package bench

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// OpenLoopResult is what one OpenLoop run measured.
type OpenLoopResult struct {
	// Latencies, one per successful request, from its scheduled send time
	// to the end of its response body.
	Latencies []time.Duration
	// Errors counts failed requests and non-200 responses.
	Errors int
	// Late is how many requests started more than 1 ms after their slot
	// (the generator itself fell behind).
	Late int
}

// OpenLoop sends GET url at a fixed rate for d, each request in its own
// goroutine so that a slow response never delays the next send. Latency
// counts from the scheduled send time, not the actual one, so a stalled
// generator or server shows up in the numbers instead of hiding (no
// coordinated omission). Every request has a 5 s timeout; the run lasts at
// most d + 5 s.
func OpenLoop(ctx context.Context, client *http.Client, url string, rate int, d time.Duration) OpenLoopResult {
	interval := time.Second / time.Duration(rate)
	n := int(d / interval)
	var (
		mu  sync.Mutex
		res = OpenLoopResult{Latencies: make([]time.Duration, 0, n)}
		wg  sync.WaitGroup
	)
	start := time.Now()
	for i := 0; i < n; i++ {
		slot := start.Add(time.Duration(i) * interval)
		if wait := time.Until(slot); wait > 0 {
			time.Sleep(wait)
		}
		if time.Since(slot) > time.Millisecond {
			res.Late++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			ok := get(rctx, client, url)
			lat := time.Since(slot)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				res.Latencies = append(res.Latencies, lat)
			} else {
				res.Errors++
			}
		}()
	}
	wg.Wait()
	return res
}

func get(ctx context.Context, client *http.Client, url string) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return false
	}
	resp, err := client.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, err = io.Copy(io.Discard, resp.Body)
	return err == nil && resp.StatusCode == http.StatusOK
}
