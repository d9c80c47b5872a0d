package integration

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestReadiness: /healthz answers while the process serves; /readyz is 503
// naming Redis while the configured Redis address is a closed port — the
// gateway starts all the same — turns 200 once something answers there,
// 503 again when it goes, and 200 when it is back.
func TestReadiness(t *testing.T) {
	t.Parallel()
	real := pgtest.RedisURL(t)
	port := gateway.FreePort(t)
	global := fmt.Sprintf("storage postgres %q\n\t\tredis \"redis://127.0.0.1:%d/0\"\n\t\tblobs file_system ./data/blobs",
		pgtest.DSN(t), port)
	cfg := gateway.V2Config(global, gateway.V2Site{})
	cfg = replaceOnce(t, cfg, "\troute {\n", "\troute {\n\t\tcomfy_health\n")
	g := gateway.Start(t, cfg, gateway.Options{})

	if r := gateway.Do(t, http.MethodGet, g.URL+"/healthz", nil, nil); r.Status != 200 || r.JSON(t)["status"] != "ok" {
		t.Fatalf("/healthz: %d %s", r.Status, r.Body)
	}
	waitReady(t, g, false, "redis")

	fwd := forwardTo(t, fmt.Sprintf("127.0.0.1:%d", port), hostOf(real))
	waitReady(t, g, true, "")
	fwd.close()
	waitReady(t, g, false, "redis")
	fwd = forwardTo(t, fmt.Sprintf("127.0.0.1:%d", port), hostOf(real))
	waitReady(t, g, true, "")
	fwd.close()
}

// waitReady polls /readyz until its answer is ready (200, every check ok)
// or, with ready false, 503 with exactly the named dependency failing.
func waitReady(t *testing.T, g *gateway.Gateway, ready bool, failing string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		r := gateway.Do(t, http.MethodGet, g.URL+"/readyz", nil, nil)
		last = fmt.Sprintf("%d %s", r.Status, r.Body)
		body := r.JSON(t)
		failed := []string{}
		for _, c := range body["checks"].([]any) {
			if c := c.(map[string]any); c["ok"] != true {
				failed = append(failed, c["name"].(string))
			}
		}
		switch {
		case ready && r.Status == 200 && body["status"] == "ready" && len(failed) == 0:
			return
		case !ready && r.Status == 503 && body["status"] == "unready" && len(failed) == 1 && failed[0] == failing:
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("/readyz never answered ready=%v (failing %q); last: %s", ready, failing, last)
}

// forwarder listens on an address and pipes each connection to a target.
type forwarder struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func forwardTo(t *testing.T, listen, target string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		t.Fatal(err)
	}
	f := &forwarder{ln: ln}
	t.Cleanup(f.close)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, up)
			f.mu.Unlock()
			go func() { io.Copy(up, c); up.Close() }()
			go func() { io.Copy(c, up); c.Close() }()
		}
	}()
	return f
}

// close stops listening (the port is closed again) and cuts every
// connection it carried.
func (f *forwarder) close() {
	f.ln.Close()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
}

// replaceOnce replaces the one occurrence of old in s, failing the test
// when there is not exactly one.
func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if n := strings.Count(s, old); n != 1 {
		t.Fatalf("%q occurs %d times in the config", old, n)
	}
	return strings.Replace(s, old, new, 1)
}

// hostOf is the host:port of a redis:// URL.
func hostOf(redisURL string) string {
	u, err := url.Parse(redisURL)
	if err != nil {
		panic(err)
	}
	return u.Host
}
