package streams

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// follower is one client following the job.
type follower struct {
	p      proto
	resp   *http.Response
	frames []frame
	err    error
	// hungUp marks the streams the client itself closes midway.
	hungUp bool
}

// TestStreamsOverEveryProtocol: streams of one queued job — one over
// HTTP/1.1, one over HTTP/3, and 110 multiplexed on one HTTP/2
// connection — stay open 40 s on keepalives, then carry the live frames
// while the job runs (across a node that is quiet for 12 s) and end
// cleanly after the terminal status. Ten of the HTTP/2 streams are closed
// by the client midway; the other hundred do not notice.
func TestStreamsOverEveryProtocol(t *testing.T) {
	t.Parallel()
	s := startSite(t, "max_streams 128")
	ctl := s.client(t, h2, clientOptions{})
	blocker := s.submit(t, ctl, busyWorkflow(900, 100)) // 90 s unless canceled
	s.waitStatus(t, ctl, blocker, "running")
	target := s.submit(t, ctl, map[string]any{
		"1": gateway.Node("SlowNode", map[string]any{"steps": 3, "step_ms": 200}),
		"2": gateway.Node("SlowNode", map[string]any{"steps": 1, "step_ms": 12000}),
		"3": gateway.Node("TextOutput", map[string]any{"text": "done"}),
	})

	var dials atomic.Int32
	h2c := s.client(t, h2, clientOptions{dials: &dials})
	followers := []*follower{
		{p: h1, resp: s.openStream(t, s.client(t, h1, clientOptions{}), h1, target)},
		{p: h3, resp: s.openStream(t, s.client(t, h3, clientOptions{}), h3, target)},
		// The first HTTP/2 stream opens the connection the others join.
		{p: h2, resp: s.openStream(t, h2c, h2, target)},
	}
	for i := 1; i < 110; i++ {
		followers = append(followers, &follower{p: h2, resp: s.openStream(t, h2c, h2, target), hungUp: i >= 100})
	}
	opened := time.Now()
	if n := dials.Load(); n != 1 {
		t.Fatalf("110 HTTP/2 streams took %d connections, want 1", n)
	}

	var wg sync.WaitGroup
	var ended atomic.Int32
	for _, f := range followers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.resp.Body.Close()
			f.frames, f.err = readFrames(f.resp.Body, nil)
			ended.Add(1)
		}()
	}
	time.Sleep(20 * time.Second)
	for _, f := range followers {
		if f.hungUp {
			f.resp.Body.Close()
		}
	}
	time.Sleep(time.Until(opened.Add(40 * time.Second)))
	if n := ended.Load(); n != 10 {
		t.Fatalf("after 40 s, %d streams ended; want only the 10 the client closed", n)
	}
	s.cancel(t, ctl, blocker)
	wg.Wait()

	for i, f := range followers {
		if f.hungUp {
			if f.err == nil {
				t.Errorf("stream %d (%s): closed by the client, yet read to a clean end", i, f.p.name)
			}
			continue
		}
		checkStory(t, f)
	}
}

// checkStory checks what one follower of the queued job saw.
func checkStory(t *testing.T, f *follower) {
	t.Helper()
	if f.err != nil {
		t.Errorf("%s: the stream did not end cleanly: %v after %v", f.p.name, f.err, f.frames)
		return
	}
	if len(f.frames) == 0 || f.frames[0].event != "status" || f.frames[0].data["status"] != "queued" {
		t.Errorf("%s: no queued snapshot first: %v", f.p.name, f.frames)
		return
	}
	keepalives, running, progress, outputs := 0, -1, 0, 0
	for i, fr := range f.frames {
		switch {
		case fr.comment == "keepalive" && running < 0:
			keepalives++
		case fr.event == "status" && fr.data["status"] == "running" && running < 0:
			running = i
		case fr.event == "progress" && running >= 0:
			progress++
		case fr.event == "output":
			outputs++
		}
	}
	last := f.frames[len(f.frames)-1]
	// 40 s of queue with a keepalive every 15 s.
	if keepalives < 2 || running < 0 || progress < 2 || outputs != 1 ||
		last.event != "status" || last.data["status"] != "succeeded" {
		t.Errorf("%s: %d keepalives while queued, running at %d, %d live progress, %d outputs, last %v: %v",
			f.p.name, keepalives, running, progress, outputs, last, f.frames)
	}
	// The 12 s node: a stream must outlive a silence longer than the
	// write timeout, with or without a keepalive in it.
	var quiet time.Duration
	prev := f.frames[running].at
	for _, fr := range f.frames[running+1:] {
		if fr.event != "" {
			quiet, prev = max(quiet, fr.at.Sub(prev)), fr.at
		}
	}
	if quiet < writeTimeout {
		t.Errorf("%s: the longest pause between live frames was %s; the test means to cover one over %s", f.p.name, quiet, writeTimeout)
	}
}
