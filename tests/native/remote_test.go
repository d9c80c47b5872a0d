package native

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// remoteRuns is how many prompts TestSocketOnAnotherProcess runs per pool;
// set NATIVE_REMOTE_RUNS to run more.
func remoteRuns(t *testing.T) int {
	if s := os.Getenv("NATIVE_REMOTE_RUNS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("NATIVE_REMOTE_RUNS=%q", s)
		}
		return n
	}
	return 10
}

// TestSocketOnAnotherProcess: two gateway processes on one Postgres and
// Redis, as behind a load balancer. The socket is on A (which runs no
// jobs); POST /prompt goes to B, which queues and runs the prompt at once,
// so the prompt may have run nodes, or finished, before A learns of it
// (B announces it once /prompt has answered). A reaches Redis through a
// proxy that delays what Redis sends it, by 0, 20 or 150 ms per run: a
// busy process or a slow link, under which the prompt has started or
// ended before the announcement reaches A. A's socket must still get
// ComfyUI's whole sequence: execution_start, execution_cached, executing
// for each node once in order, executed for the output node right after
// its executing, execution_success, executing null last; each progress
// names the node announced last and its value rises strictly (the peer
// pool repeated a count with the next node's start when a node ended
// 250 ms or more before the next one started). A second socket
// with the same client id on B (which follows the prompt from before it
// exists) gets the same messages. Before the fix the remote socket missed
// the first executing messages in about half of the runs (32 and 24 of
// 50, built-in and peer pool).
func TestSocketOnAnotherProcess(t *testing.T) {
	t.Parallel()
	t.Run("builtin", func(t *testing.T) {
		t.Parallel()
		testSocketOnAnotherProcess(t, "", "")
	})
	t.Run("comfyui-peer", func(t *testing.T) {
		t.Parallel()
		peer := comfyuipeer.New(t, comfyuipeer.Options{})
		testSocketOnAnotherProcess(t, "gpu", fmt.Sprintf("\n\t\tpool gpu comfyui {\n\t\t\tworker %s\n\t\t}", peer.URL))
	})
	// Nodes 300 ms apart: every node's end and the next one's start are
	// two snapshots past the dispatcher's 250 ms throttle (the peer pool
	// sent each count twice, with the node that ended and the next one).
	t.Run("comfyui-peer-slow", func(t *testing.T) {
		t.Parallel()
		peer := comfyuipeer.New(t, comfyuipeer.Options{})
		peer.Set(func(sw *comfyuipeer.Switches) { sw.Slow = 300 * time.Millisecond })
		testSocketOnAnotherProcess(t, "gpu", fmt.Sprintf("\n\t\tpool gpu comfyui {\n\t\t\tworker %s\n\t\t}", peer.URL))
	})
}

func testSocketOnAnotherProcess(t *testing.T, pool, poolConfig string) {
	dsn, rurl, blobs := pgtest.DSN(t), pgtest.RedisURL(t), t.TempDir()
	global := func(jobs string) string {
		return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\tblobs file_system %q\n\t\tjobs {\n\t\t\t%s\n\t\t}%s",
			dsn, rurl, blobs, jobs, poolConfig)
	}
	b := gateway.Start(t, gateway.NativeConfig(global("concurrency 2"), pool), gateway.Options{})
	delay := &atomic.Int64{}
	rurl = delayed(t, rurl, delay)
	a := gateway.Start(t, gateway.NativeConfig(global("no_execute"), pool), gateway.Options{})
	onB := newClient(t, b, "remote-"+pool)
	onA := &client{t: t, base: a.URL, key: onB.key} // one account: the key is in the shared database
	onB.upload("remote.png", gateway.GradientPNG(t, 16))
	empty := map[string]any{
		"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 16, "height": 16, "batch_size": 1, "color": 0}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "remote", "images": []any{"2", 0}}},
	}
	// blur's node 2 runs for a while (a 31 px blur of 1024²): a socket
	// whose announcement comes late starts from a snapshot mid-run.
	blur := map[string]any{
		"1": map[string]any{"class_type": "EmptyImage", "inputs": map[string]any{"width": 1024, "height": 1024, "batch_size": 1, "color": 1234567}},
		"2": map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{"1", 0}, "blur_radius": 31, "sigma": 3}},
		"3": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"2", 0}}},
		"4": map[string]any{"class_type": "PreviewImage", "inputs": map[string]any{"images": []any{"3", 0}}},
	}
	prompts := []struct {
		prompt map[string]any
		nodes  []string
	}{{invert("remote.png"), []string{"1", "2", "3"}}, {empty, []string{"1", "2", "3"}}, {blur, []string{"1", "2", "3", "4"}}}
	failures := 0
	runs := remoteRuns(t)
	for i := range runs {
		p := prompts[i/3%len(prompts)]
		want := []string{"execution_start", "execution_cached"}
		for _, n := range p.nodes {
			want = append(want, "executing "+n)
		}
		want = append(want, "executed "+p.nodes[len(p.nodes)-1], "execution_success", "executing null")
		delay.Store(int64([]time.Duration{150, 0, 20}[i%3] * time.Millisecond))
		clientID := fmt.Sprintf("remote-%d", i)
		remote, local := onA.dial(clientID), onB.dial(clientID)
		id := onB.queue(p.prompt, clientID)
		failed := false
		for _, s := range []struct {
			name string
			ws   *socket
		}{{"socket on A (remote)", remote}, {"socket on B (local)", local}} {
			msgs := ofPrompt(s.ws.until(t, "execution_success", id, 60*time.Second), id)
			msgs = append(msgs, ofPrompt(s.ws.drain(300*time.Millisecond), id)...)
			bad := false
			if got := outline(msgs); !slices.Equal(got, want) {
				bad = true
				t.Errorf("run %d (delay %s), %s: messages %v, want %v", i, time.Duration(delay.Load()), s.name, got, want)
			}
			if problems := progressProblems(msgs); len(problems) > 0 {
				bad = true
				t.Errorf("run %d (delay %s), %s: %s", i, time.Duration(delay.Load()), s.name, strings.Join(problems, "; "))
			}
			if bad {
				failed = true
				for _, m := range msgs {
					t.Logf("  %v", m)
				}
			}
		}
		if failed {
			failures++
		}
		remote.conn.CloseNow()
		local.conn.CloseNow()
	}
	t.Logf("%d of %d runs with a wrong sequence", failures, runs)
}

// outline is a prompt's messages without progress: type, and the node of
// executing and executed.
func outline(msgs []map[string]any) []string {
	var out []string
	for _, m := range msgs {
		typ, _ := m["type"].(string)
		switch typ {
		case "progress":
			continue
		case "executing", "executed":
			node, ok := dataOf(m)["node"].(string)
			if !ok {
				node = "null"
			}
			typ += " " + node
		}
		out = append(out, typ)
	}
	return out
}

// delayed starts a proxy in front of the Redis at rurl that holds what
// Redis sends for *delay (read when it arrives), in order, and returns
// rurl pointing at it.
func delayed(t *testing.T, rurl string, delay *atomic.Int64) string {
	t.Helper()
	u, err := url.Parse(rurl)
	if err != nil {
		t.Fatal(err)
	}
	upstream := u.Host
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go proxy(c, upstream, delay)
		}
	}()
	u.Host = ln.Addr().String()
	return u.String()
}

func proxy(c net.Conn, upstream string, delay *atomic.Int64) {
	defer c.Close()
	r, err := net.Dial("tcp", upstream)
	if err != nil {
		return
	}
	defer r.Close()
	go func() {
		io.Copy(r, c)
		r.Close()
	}()
	type chunk struct {
		due  time.Time
		data []byte
	}
	chunks := make(chan chunk, 4096)
	go func() {
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := r.Read(buf)
			if n > 0 {
				chunks <- chunk{time.Now().Add(time.Duration(delay.Load())), buf[:n]}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		time.Sleep(time.Until(ch.due))
		if _, err := c.Write(ch.data); err != nil {
			return
		}
	}
}
