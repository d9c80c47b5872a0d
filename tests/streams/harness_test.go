// Package streams runs the real gateway on a TLS site (Caddy's internal
// CA, as a hosted front door would have a public one) and checks what
// lives long on a connection — job event streams, large downloads and
// uploads — over HTTP/1.1, HTTP/2 and HTTP/3 alike: idle streams stay
// open with keepalives, live frames arrive, streams end cleanly, and a
// client that stops reading is cut within the stated bound.
package streams

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/quic-go/quic-go"
	"github.com/quic-go/quic-go/http3"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// The gateway's stream timing (modules/comfyjobs/events.go), which the
// bounds below are stated in.
const (
	keepaliveInterval = 15 * time.Second
	writeTimeout      = 10 * time.Second
)

// site is a TLS gateway whose jobs run on one ComfyUI peer, one at a time.
type site struct {
	g     *gateway.Gateway
	peer  *comfyuipeer.Peer
	admin string // Caddy's admin address (for the goroutine profile)
}

// startSite starts a peer and a gateway in front of it on
// https://127.0.0.1:<port>; jobs is the body of the app's jobs block.
func startSite(t *testing.T, jobs string) *site {
	t.Helper()
	s := &site{peer: comfyuipeer.New(t, comfyuipeer.Options{}),
		admin: fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))}
	global := `storage embedded ./data
		max_upload_size 128MiB
		jobs {
			` + jobs + `
		}
		pool gpu comfyui {
			worker ` + s.peer.URL + ` {
				concurrency 1
			}
		}`
	cfg := gateway.V2Config(global, gateway.V2Site{TLS: true, Pool: "gpu", Admin: s.admin})
	s.g = gateway.Start(t, cfg, gateway.Options{TLS: true})
	return s
}

// proto is one HTTP version's client.
type proto struct {
	name  string
	major int
}

var (
	h1 = proto{"HTTP/1.1", 1}
	h2 = proto{"HTTP/2", 2}
	h3 = proto{"HTTP/3", 3}
)

// clientOptions shape a client.
type clientOptions struct {
	// window bounds what the client accepts before its reader takes it
	// (socket receive buffer, HTTP/2 or HTTP/3 stream window); 0 leaves
	// the defaults.
	window int
	// dials counts the TCP connections the client opens.
	dials *atomic.Int32
}

// client returns an HTTP client for p that trusts the site's CA only.
func (s *site) client(t *testing.T, p proto, o clientOptions) *http.Client {
	t.Helper()
	tlsConf := s.g.TLSConfig(t)
	var rt http.RoundTripper
	if p.major == 3 {
		qc := &quic.Config{KeepAlivePeriod: 5 * time.Second}
		if o.window > 0 {
			qc.InitialStreamReceiveWindow, qc.MaxStreamReceiveWindow = uint64(o.window), uint64(o.window)
		}
		tr := &http3.Transport{TLSClientConfig: tlsConf, QUICConfig: qc}
		t.Cleanup(func() { tr.Close() })
		rt = tr
	} else {
		dialer := &net.Dialer{}
		if o.window > 0 && p.major == 1 {
			dialer.Control = func(_, _ string, c syscall.RawConn) error {
				var serr error
				err := c.Control(func(fd uintptr) {
					serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, o.window)
				})
				if err != nil {
					return err
				}
				return serr
			}
		}
		protocols := new(http.Protocols)
		protocols.SetHTTP1(p.major == 1)
		protocols.SetHTTP2(p.major == 2)
		tr := &http.Transport{TLSClientConfig: tlsConf, Protocols: protocols,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				if o.dials != nil {
					o.dials.Add(1)
				}
				return dialer.DialContext(ctx, network, addr)
			}}
		if o.window > 0 && p.major == 2 {
			tr.HTTP2 = &http.HTTP2Config{MaxReceiveBufferPerStream: o.window}
		}
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	}
	return &http.Client{Transport: rt}
}

// submit posts a workflow and returns the job id.
func (s *site) submit(t *testing.T, c *http.Client, wf map[string]any) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.DoWith(t, c, http.MethodPost, s.g.URL+"/api/v2/jobs", bytes.NewReader(raw),
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": uuid.NewString()})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func (s *site) cancel(t *testing.T, c *http.Client, id string) {
	t.Helper()
	if r := gateway.DoWith(t, c, http.MethodPost, s.g.URL+"/api/v2/jobs/"+id+"/cancel", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.Status, r.Body)
	}
}

// waitStatus polls a job until its status is want.
func (s *site) waitStatus(t *testing.T, c *http.Client, id, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		r := gateway.DoWith(t, c, http.MethodGet, s.g.URL+"/api/v2/jobs/"+id, nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("GET job: %d %s", r.Status, r.Body)
		}
		if got := r.JSON(t)["status"]; got == want {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("job %s is %v after a minute, want %s", id, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openStream starts a job's event stream and returns the response once
// its headers are in, checking the protocol it came over.
func (s *site) openStream(t *testing.T, c *http.Client, p proto, id string) *http.Response {
	t.Helper()
	resp, err := c.Get(s.g.URL + "/api/v2/jobs/" + id + "/events")
	if err != nil {
		t.Fatalf("%s: events: %v", p.name, err)
	}
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != p.major {
		resp.Body.Close()
		t.Fatalf("%s: events answered %d over %s", p.name, resp.StatusCode, resp.Proto)
	}
	return resp
}

// frame is one thing read from an event stream: an event, or a comment
// (a keepalive), with when it arrived.
type frame struct {
	at      time.Time
	comment string
	event   string
	data    map[string]any
}

func (f frame) String() string {
	if f.event == "" {
		return "comment(" + f.comment + ")"
	}
	if f.event == "status" {
		return fmt.Sprintf("status(%v)", f.data["status"])
	}
	return f.event
}

// readFrames reads an event stream until it ends. The error is the one
// that ended it: nil for a clean end of the body, never for a reset.
func readFrames(body io.Reader, onFrame func(frame)) ([]frame, error) {
	var frames []frame
	var cur frame
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, ":"):
			f := frame{at: time.Now(), comment: strings.TrimSpace(line[1:])}
			frames = append(frames, f)
			if onFrame != nil {
				onFrame(f)
			}
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[len("data: "):]), &cur.data); err != nil {
				return frames, fmt.Errorf("data is not a JSON object: %.80q", line)
			}
		case line == "" && cur.event != "":
			cur.at = time.Now()
			frames = append(frames, cur)
			if onFrame != nil {
				onFrame(cur)
			}
			cur = frame{}
		}
	}
	return frames, sc.Err()
}

// busyWorkflow keeps the peer busy for steps×stepMS.
func busyWorkflow(steps, stepMS int) map[string]any {
	return map[string]any{"1": gateway.Node("SlowNode", map[string]any{"steps": steps, "step_ms": stepMS})}
}
