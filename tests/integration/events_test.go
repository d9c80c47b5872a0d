package integration

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestEventStreams: several clients follow one job (they share one watch
// server side), each sees the whole story and its stream ends by itself;
// the per-account cap refuses one stream too many and frees a slot as soon
// as a client hangs up; a finished job's stream replays its end; HTTP/1.0
// clients (whose connections are not parked) are served too.
func TestEventStreams(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	global := "storage embedded ./data\n\t\tjobs {\n\t\t\tconcurrency 1\n\t\t\tmax_streams 3\n\t\t}"
	g := gateway.Start(t, siteConfig(global, "comfy_auth none"), gateway.Options{Dir: dir})

	submitID := func(wf map[string]any) string {
		r := submit(t, g, map[string]any{"workflow": wf}, nil)
		if r.Status != http.StatusCreated {
			t.Fatalf("submit: %d %s", r.Status, r.Body)
		}
		return r.JSON(t)["id"].(string)
	}
	first := submitID(slowWorkflow(2)) // holds the only worker slot
	followed := submitID(slowWorkflow(1))
	eventsURL := func(id string) string { return g.URL + "/api/v2/jobs/" + id + "/events" }

	// Three clients follow the queued job at once.
	var wg sync.WaitGroup
	got := make([][]gateway.SSEEvent, 3)
	opened := make(chan struct{}, 3)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = readStream(t, eventsURL(followed), opened)
		}()
	}
	for range got {
		<-opened
	}
	// A fourth stream of the same account is over max_streams.
	r := do(t, http.MethodGet, eventsURL(first), nil, nil)
	if r.Status != http.StatusTooManyRequests || r.errorCode(t) != "too_many_streams" || r.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth stream: %d %s (Retry-After %q)", r.Status, r.Body, r.Header.Get("Retry-After"))
	}
	wg.Wait()
	for i, events := range got {
		checkStory(t, fmt.Sprintf("client %d", i), events, "queued")
	}

	// The ended streams gave their slots back: a finished job's stream
	// replays its outputs and terminal status, and ends.
	replay := readStream(t, eventsURL(followed), nil)
	if n := len(replay); n != 2 || replay[0].Name != "output" || replay[1].Data["status"] != "succeeded" {
		t.Fatalf("stream of a finished job: %v", names(replay))
	}

	// Clients that hang up free their slots without waiting for a write to
	// fail (the next keepalive is 15 s away).
	long := submitID(slowWorkflow(40))
	for round := 0; round < 2; round++ {
		var conns []net.Conn
		for i := 0; i < 3; i++ {
			// The previous round's probe was hung up just now: its slot
			// comes back once the server has seen that (checked below).
			conns = append(conns, openRawStreamWhenFree(t, g, long))
		}
		for _, c := range conns {
			c.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, status := tryRawStream(t, g, long, "HTTP/1.1")
			if c != nil {
				c.Close()
			}
			if strings.Contains(status, " 200 ") {
				break
			}
			if !strings.Contains(status, " 429 ") || time.Now().After(deadline) {
				t.Fatalf("round %d: a stream after the others hung up: %q", round, status)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// HTTP/1.0: no chunking, the body ends when the server closes.
	c := openRawStream(t, g, followed, "HTTP/1.0")
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	body, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("HTTP/1.0 stream: %v", err)
	}
	if !strings.Contains(string(body), "event: output") || !strings.Contains(string(body), `"status":"succeeded"`) {
		t.Fatalf("HTTP/1.0 stream body: %q", body)
	}
	do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+long+"/cancel", nil, nil)
}

// readStream reads a job's events with Go's HTTP client (which checks the
// chunked framing) until the server ends the stream; opened, if set, is
// signalled once the first event arrived.
func readStream(t *testing.T, url string, opened chan<- struct{}) []gateway.SSEEvent {
	client := &http.Client{Timeout: 2 * time.Minute}
	resp, err := client.Get(url)
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.TransferEncoding == nil || resp.TransferEncoding[0] != "chunked" {
		t.Errorf("events: %d, transfer encoding %v", resp.StatusCode, resp.TransferEncoding)
		return nil
	}
	if !resp.Close {
		t.Errorf("an event stream must announce Connection: close (its connection ends with it)")
	}
	first := true
	events, err := gateway.ParseEvents(resp.Body, func(gateway.SSEEvent) {
		if first && opened != nil {
			opened <- struct{}{}
		}
		first = false
	})
	if err != nil {
		t.Errorf("reading events: %v after %v", err, names(events))
	}
	return events
}

// checkStory checks one client's view of a job it followed from status
// from: the snapshot first, progress, the output before the terminal
// status, which comes last.
func checkStory(t *testing.T, who string, events []gateway.SSEEvent, from string) {
	t.Helper()
	if len(events) < 4 || events[0].Name != "status" || events[0].Data["status"] != from {
		t.Fatalf("%s: %v", who, names(events))
	}
	if from == "queued" && events[0].Data["queue_position"] != float64(1) {
		t.Errorf("%s: snapshot queue_position %v", who, events[0].Data["queue_position"])
	}
	var sawRunning, sawProgress bool
	outputs := 0
	for _, e := range events[:len(events)-1] {
		switch {
		case e.Name == "status" && e.Data["status"] == "running":
			sawRunning = true
		case e.Name == "progress":
			sawProgress = true
		case e.Name == "output":
			outputs++
		}
	}
	last := events[len(events)-1]
	if !sawRunning || !sawProgress || outputs != 1 || last.Name != "status" || last.Data["status"] != "succeeded" {
		t.Errorf("%s: running %v, progress %v, %d outputs, last %v: %v", who, sawRunning, sawProgress, outputs, last.Data["status"], names(events))
	}
}

// openRawStream opens a job's stream over a raw connection with the given
// protocol version and returns it once the 200 is read.
func openRawStream(t *testing.T, g *gateway.Gateway, id, proto string) net.Conn {
	t.Helper()
	c, status := tryRawStream(t, g, id, proto)
	if !strings.Contains(status, " 200 ") {
		t.Fatalf("stream over %s: %q", proto, status)
	}
	return c
}

// openRawStreamWhenFree opens an HTTP/1.1 stream of id, retrying while the
// account is at max_streams, for up to 10 s.
func openRawStreamWhenFree(t *testing.T, g *gateway.Gateway, id string) net.Conn {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, status := tryRawStream(t, g, id, "HTTP/1.1")
		if strings.Contains(status, " 200 ") {
			return c
		}
		c.Close()
		if !strings.Contains(status, " 429 ") || time.Now().After(deadline) {
			t.Fatalf("stream over HTTP/1.1: %q", status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tryRawStream(t *testing.T, g *gateway.Gateway, id, proto string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", g.Port))
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /api/v2/jobs/%s/events %s\r\nHost: 127.0.0.1\r\n\r\n", id, proto)
	status, err := bufio.NewReaderSize(c, 16).ReadString('\n')
	if err != nil {
		c.Close()
		t.Fatalf("reading the status line: %v", err)
	}
	c.SetDeadline(time.Time{})
	return c, status
}
