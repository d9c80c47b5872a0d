package streams

import (
	"bufio"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// streamFuncs are the gateway functions in which a goroutine serves an
// event stream: the request goroutine of an HTTP/2 or HTTP/3 stream, the
// watcher of a parked HTTP/1.1 connection, and the job's watch.
var streamFuncs = []string{
	"comfyjobs.(*writerSink).serveWriter",
	"comfyjobs.(*parkedSink).watchClient",
	"comfyjobs.(*watch).run",
}

// TestStalledClientIsCut: a client that stops reading a stream that has
// much to say (a job sending large previews) is cut within the stated
// bound — writeTimeout after the first write it does not take, so at most
// keepaliveInterval + writeTimeout after it stops reading — on every
// protocol. The cut is a reset (or, on HTTP/1.1, a connection closed
// mid-body), never a clean end the client could take for the whole
// story; no goroutine of the stream remains; and the gateway goes on
// serving the job's streams.
func TestStalledClientIsCut(t *testing.T) {
	t.Parallel()
	for _, p := range []proto{h1, h2, h3} {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			s := startSite(t, "max_streams 4")
			ctl := s.client(t, h2, clientOptions{})
			job := s.submit(t, ctl, map[string]any{
				"1": gateway.Node("PreviewNode", map[string]any{"frames": 200, "step_ms": 300, "size": 384})})
			s.waitStatus(t, ctl, job, "running")
			defer s.cancel(t, ctl, job)

			stalled := s.openStream(t, s.client(t, p, clientOptions{window: 4096}), p, job)
			defer stalled.Body.Close()
			opened := time.Now()
			// The headers reach the client a moment before the stream's
			// goroutines start (HTTP/1.1: the connection is parked after).
			for s.streamGoroutines(t) == 0 {
				if time.Since(opened) > 5*time.Second {
					t.Fatal("no goroutine serves the open stream; the leak check below would prove nothing")
				}
				time.Sleep(20 * time.Millisecond)
			}
			bound := keepaliveInterval + writeTimeout
			for s.streamGoroutines(t) > 0 {
				if time.Since(opened) > bound+5*time.Second {
					t.Fatalf("the stalled stream is still served %s after it opened (bound %s)", time.Since(opened), bound)
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Logf("%s: cut %s after the client stopped reading", p.name, time.Since(opened).Round(100*time.Millisecond))

			taken, err := io.ReadAll(stalled.Body)
			t.Logf("%s: the client's read ended with %v", p.name, err)
			if err == nil {
				t.Errorf("the cut stream read to a clean end")
			}
			if strings.Contains(string(taken), `"status":"succeeded"`) || strings.Contains(string(taken), `"status":"canceled"`) {
				t.Errorf("the stalled client got a terminal status")
			}

			fresh := s.openStream(t, s.client(t, p, clientOptions{}), p, job)
			first := readFirstEvent(t, fresh.Body)
			fresh.Body.Close()
			if len(first) != 1 || first[0].event != "status" || first[0].data["status"] != "running" {
				t.Errorf("a new stream after the cut: %v", first)
			}
		})
	}
}

// streamGoroutines counts the gateway's goroutines in streamFuncs, from
// the goroutine profile on Caddy's admin endpoint.
func (s *site) streamGoroutines(t *testing.T) int {
	t.Helper()
	r := gateway.Do(t, http.MethodGet, "http://"+s.admin+"/debug/pprof/goroutine?debug=1", nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("goroutine profile: %d %s", r.Status, r.Body)
	}
	n := 0
	// Records are "<count> @ <pcs>" followed by their frames, one blank
	// line apart.
	for _, record := range strings.Split(string(r.Body), "\n\n") {
		count, _, ok := strings.Cut(record, " @ ")
		if !ok {
			continue
		}
		for _, fn := range streamFuncs {
			if strings.Contains(record, fn) {
				c, _ := strconv.Atoi(count)
				n += c
				break
			}
		}
	}
	return n
}

// readFirstEvent reads a stream up to the end of its first event.
func readFirstEvent(t *testing.T, body io.Reader) []frame {
	t.Helper()
	br := bufio.NewReader(body)
	var text strings.Builder
	for {
		line, err := br.ReadString('\n')
		text.WriteString(line)
		if err != nil {
			t.Fatalf("reading the first event: %v after %q", err, text.String())
		}
		if line == "\n" && strings.Contains(text.String(), "event: ") {
			break
		}
	}
	frames, err := readFrames(strings.NewReader(text.String()), nil)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}
