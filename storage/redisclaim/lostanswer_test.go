package redisclaim_test

import (
	"bytes"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redisclaim"
)

// answerDropper forwards connections to a Redis server and, while armed,
// cuts the first connection that sends a SET right after Redis ran it,
// before its answer reaches the client.
type answerDropper struct {
	l      net.Listener
	target string
	armed  atomic.Bool
}

func newAnswerDropper(t *testing.T, target string) *answerDropper {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &answerDropper{l: l, target: target}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			var cut atomic.Bool
			go func() { // replies: dropped once the connection is cut
				buf := make([]byte, 32<<10)
				for {
					n, err := s.Read(buf)
					if err != nil || cut.Load() {
						c.Close()
						s.Close()
						return
					}
					if _, err := c.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
			go func() { // commands
				buf := make([]byte, 32<<10)
				for {
					n, err := c.Read(buf)
					if err != nil {
						s.Close()
						return
					}
					if p.armed.Load() && bytes.Contains(bytes.ToLower(buf[:n]), []byte("\r\nset\r\n")) && p.armed.CompareAndSwap(true, false) {
						cut.Store(true)
					}
					if _, err := s.Write(buf[:n]); err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// TestClaimWhoseAnswerIsLost: Redis runs a claim's SET and the answer never
// comes back (the connection is cut). Whatever Claim answers, the key is
// not left taken with nobody knowing: either Claim reports the claim as
// taken (the client's retry found its own SET), or it reports the failure
// and the key is free for the client's retry. Before, the retried SET
// found the key taken by the call itself and answered "held", so the
// request was refused as a key reuse and every retry after it too, for
// the claim's whole TTL.
func TestClaimWhoseAnswerIsLost(t *testing.T) {
	url := pgtest.RedisURL(t)
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"one server"} {
		t.Run(name, func(t *testing.T) {
			p := newAnswerDropper(t, opts.Addr)
			proxied := strings.Replace(url, opts.Addr, p.l.Addr().String(), 1)
			st, err := redisclaim.New(proxied, pgtest.KeyPrefix(t))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			key := "k-" + time.Now().Format("150405.000000")
			p.armed.Store(true)
			ok, err := st.Claim(testCtx(t), "jobs", key, time.Hour)
			if p.armed.Load() {
				t.Fatal("the proxy saw no SET")
			}
			again, err2 := st.Claim(testCtx(t), "jobs", key, time.Hour)
			if err2 != nil {
				t.Fatalf("second claim: %v", err2)
			}
			switch {
			case err == nil && ok && again:
				t.Error("claimed twice")
			case err == nil && !ok:
				t.Errorf("the claim whose answer was lost answered \"held\" (taken by itself)")
			case err != nil && !again:
				t.Errorf("the claim failed (%v) and left its key taken", err)
			}
			t.Logf("lost answer: Claim = %v, %v; a second claim = %v", ok, err, again)
		})
	}
}
