package native

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestSocketsCountAgainstMaxStreams: max_streams bounds an account's
// event streams and ComfyUI sockets together, across both of the site's
// ComfyUI mounts (/ws and /comfy/ws): with max_streams 4, two streams and
// two sockets fill it, and the next socket or stream of that account is
// 429 too_many_streams; a client reconnecting with its client id is let
// in; another account is not held back; a slot freed by either kind is
// taken by the other.
func TestSocketsCountAgainstMaxStreams(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, gateway.NativeConfig("storage embedded ./data\n\t\tjobs {\n\t\t\tmax_streams 4\n\t\t}", ""), gateway.Options{})
	a, b := newClient(t, g, "streams-a"), newClient(t, g, "streams-b")
	r := a.do(http.MethodPost, "/api/v2/jobs", map[string]any{"workflow": blurs(150)})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	job := r.JSON(t)["id"].(string)
	t.Cleanup(func() { a.do(http.MethodPost, "/api/v2/jobs/"+job+"/cancel", nil) })

	s1, s2 := eventStream(t, a, job), eventStream(t, a, job)
	for _, s := range []streamOpen{s1, s2} {
		if s.status != http.StatusOK {
			t.Fatalf("stream: %d, want 200", s.status)
		}
	}
	for _, c := range []struct{ mount, id string }{{"", "c1"}, {"/comfy", "c2"}} {
		if st := socketStatus(t, a, c.mount, c.id); st != http.StatusSwitchingProtocols {
			t.Fatalf("socket %s/ws %s: %d, want 101", c.mount, c.id, st)
		}
	}
	// Full: two streams and two sockets.
	for _, mount := range []string{"", "/comfy"} {
		if st := socketStatus(t, a, mount, "c3"); st != http.StatusTooManyRequests {
			t.Errorf("a fifth connection, a socket at %s/ws: %d, want 429", mount, st)
		}
	}
	if s := eventStream(t, a, job); s.status != http.StatusTooManyRequests || !strings.Contains(s.head, "too_many_streams") {
		t.Errorf("a fifth connection, a stream: %d %q, want 429 too_many_streams", s.status, s.head)
	}
	if st := socketStatus(t, a, "", "c1"); st != http.StatusSwitchingProtocols {
		t.Errorf("c1 reconnecting at the bound: %d, want 101 (it replaces its older socket)", st)
	}
	if st := socketStatus(t, b, "", "b1"); st != http.StatusSwitchingProtocols {
		t.Errorf("another account's socket: %d, want 101", st)
	}

	// A stream that ends frees a slot for a socket.
	s1.conn.Close()
	deadline := time.Now().Add(15 * time.Second)
	for socketStatus(t, a, "", "c4") != http.StatusSwitchingProtocols {
		if time.Now().After(deadline) {
			t.Fatal("the closed stream's slot never went to a socket")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// blurs is EmptyImage → n blurs of 1024² → SaveImage, about 0.2 s of CPU
// a blur on the built-in executor: 150 hold the job's streams open for
// half a minute.
func blurs(n int) map[string]any {
	p := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 1024, "height": 1024, "batch_size": 1, "color": 1234567}}}
	prev := "1"
	for i := range n {
		id := fmt.Sprint(i + 10)
		p[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{prev, 0}, "blur_radius": 31, "sigma": 3}}
		prev = id
	}
	p["9"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "blurs", "images": []any{prev, 0}}}
	return p
}

// streamOpen is an event stream's answer: its status, the head of the
// answer (headers and, for an error, the start of its body) and the
// connection, held open.
type streamOpen struct {
	status int
	head   string
	conn   net.Conn
}

// eventStream opens GET /api/v2/jobs/{id}/events over a connection of its
// own, closed when the test ends.
func eventStream(t *testing.T, c *client, id string) streamOpen {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(c.base, "http://"), 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET /api/v2/jobs/%s/events HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n", id, c.key)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("stream of %s: %v", id, err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	head := fmt.Sprint(resp.Header)
	if resp.StatusCode != http.StatusOK {
		buf := make([]byte, 256)
		n, _ := resp.Body.Read(buf)
		head += " " + string(buf[:n])
	}
	return streamOpen{status: resp.StatusCode, head: head, conn: conn}
}

// socketStatus opens <mount>/ws?clientId= with the key as ?token= and
// returns the handshake's status; an opened socket stays open until the
// test ends.
func socketStatus(t *testing.T, c *client, mount, clientID string) int {
	t.Helper()
	u := strings.Replace(c.base, "http", "ws", 1) + mount + "/ws?" + url.Values{"clientId": {clientID}, "token": {c.key}}.Encode()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u, nil)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s: %v", u, err)
		}
		return resp.StatusCode
	}
	t.Cleanup(func() { conn.CloseNow() })
	// Keep reading, as a client does, so that the socket stays healthy.
	go func() {
		for {
			if _, _, err := conn.Read(context.Background()); err != nil {
				return
			}
		}
	}()
	return http.StatusSwitchingProtocols
}
