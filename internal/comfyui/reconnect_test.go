package comfyui_test

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/comfyui"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestReconnectBacksOffAfterImmediateDrops: a worker whose sockets are
// closed right after the upgrade must be redialed with a growing backoff,
// not in a tight loop.
func TestReconnectBacksOffAfterImmediateDrops(t *testing.T) {
	seen, done, restore := comfyui.RecordReconnectSleeps(5)
	defer restore()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	peer.Set(func(s *comfyuipeer.Switches) { s.CloseSocketsOnAccept = true })
	pool, err := comfyui.New(comfyui.Config{
		Workers:      []comfyui.WorkerConfig{{URL: peer.URL}},
		ReconnectMax: 10 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool.Start()
	defer pool.Close()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the pool waited %v between reconnects; want 5 waits", seen())
	}
	waits := seen()
	for i := 1; i < len(waits); i++ {
		if waits[i] <= waits[i-1] {
			t.Fatalf("reconnect waits %v do not grow", waits)
		}
	}
	if s := peer.Stats(); s.Sockets > 6 {
		t.Errorf("%d sockets for 5 waits: the pool redials without waiting", s.Sockets)
	}
}

// TestUnansweredPingReconnects: a socket that goes silent without closing
// (the flow dropped between gateway and worker, no FIN or RST) is noticed by
// its unanswered ping and replaced, while a healthy socket whose pings are
// answered is kept.
func TestUnansweredPingReconnects(t *testing.T) {
	restore := comfyui.SetPingTiming(50*time.Millisecond, 200*time.Millisecond)
	defer restore()
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	link := newBlackholeProxy(t, strings.TrimPrefix(peer.URL, "http://"))
	pool, err := comfyui.New(comfyui.Config{
		Workers:      []comfyui.WorkerConfig{{URL: "http://" + link.addr()}},
		ReconnectMax: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pool.Start()
	defer pool.Close()
	eventually(t, "the first socket", func() bool { return peer.Stats().Sockets == 1 })

	// Twenty ping periods on a healthy link: still the first socket.
	time.Sleep(time.Second)
	if n := peer.Stats().Sockets; n != 1 {
		t.Fatalf("%d sockets on a healthy link; answered pings must not reconnect", n)
	}

	link.silenceOpenConnections()
	eventually(t, "a new socket after the link went silent", func() bool { return peer.Stats().Sockets >= 2 })
}

// blackholeProxy forwards TCP connections to target and can silence the
// ones open at the time: their bytes are swallowed in both directions while
// both TCP connections stay open, as when a NAT forgets a flow. Connections
// made afterwards forward normally.
type blackholeProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	open   []*atomic.Bool
}

func newBlackholeProxy(t *testing.T, target string) *blackholeProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blackholeProxy{ln: ln, target: target}
	var conns sync.WaitGroup
	var all []net.Conn
	var allMu sync.Mutex
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
			silent := new(atomic.Bool)
			p.mu.Lock()
			p.open = append(p.open, silent)
			p.mu.Unlock()
			allMu.Lock()
			all = append(all, c, up)
			allMu.Unlock()
			conns.Add(2)
			go func() { defer conns.Done(); pipe(up, c, silent) }()
			go func() { defer conns.Done(); pipe(c, up, silent) }()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		allMu.Lock()
		for _, c := range all {
			c.Close()
		}
		allMu.Unlock()
		conns.Wait()
	})
	return p
}

func (p *blackholeProxy) addr() string { return p.ln.Addr().String() }

func (p *blackholeProxy) silenceOpenConnections() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.open {
		s.Store(true)
	}
}

// pipe copies src to dst until src fails, dropping what it reads once
// silent is set.
func pipe(dst, src net.Conn, silent *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !silent.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}
