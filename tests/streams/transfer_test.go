package streams

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/zeebo/blake3"
	"golang.org/x/time/rate"

	"github.com/comfygate/comfygate/tests/gateway"
)

// linkRate is the slow link's bandwidth each way: a 100 MiB transfer
// takes about 12 s, longer than any of the gateway's write timeouts.
const linkRate = 8 << 20

// TestSlowLinkTransfersOverHTTP2: over an HTTP/2 connection on a link
// limited to 8 MiB/s each way, a 100 MiB upload and a 100 MiB ranged
// download (all but the first MiB of an asset) run at once and both
// complete, byte for byte.
func TestSlowLinkTransfersOverHTTP2(t *testing.T) {
	t.Parallel()
	s := startSite(t, "")
	stored := randomBytes(101<<20, 1)
	storedID := s.upload(t, s.client(t, h2, clientOptions{}), stored, "stored.bin", http.StatusCreated)

	link := newSlowLink(t, fmt.Sprintf("127.0.0.1:%d", s.g.Port), linkRate)
	slow := s.client(t, h2, clientOptions{})
	slow.Transport.(*http.Transport).DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, network, link.addr())
	}

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		start := time.Now()
		s.upload(t, slow, randomBytes(100<<20, 2), "sent.bin", http.StatusCreated)
		t.Logf("100 MiB upload over the slow link: %s", time.Since(start).Round(100*time.Millisecond))
	}()
	go func() {
		defer wg.Done()
		start := time.Now()
		const from = 1 << 20
		req, _ := http.NewRequest(http.MethodGet, s.g.URL+"/api/v2/assets/"+storedID+"/content", nil)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-", from))
		resp, err := slow.Do(req)
		if err != nil {
			t.Errorf("ranged download: %v", err)
			return
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusPartialContent || resp.ProtoMajor != 2 {
			t.Errorf("ranged download: %d over %s, %d bytes, %v", resp.StatusCode, resp.Proto, len(got), err)
			return
		}
		if !bytes.Equal(got, stored[from:]) {
			t.Errorf("ranged download: %d bytes that differ from the asset's last %d", len(got), len(stored)-from)
		}
		t.Logf("100 MiB ranged download over the slow link: %s", time.Since(start).Round(100*time.Millisecond))
	}()
	wg.Wait()
	if link.conns() != 1 {
		t.Errorf("the transfers took %d connections, want one HTTP/2 connection", link.conns())
	}
}

// upload posts data as an asset and returns its id, checking the status
// and the hash the gateway computed.
func (s *site) upload(t *testing.T, c *http.Client, data []byte, name string, want int) string {
	t.Helper()
	r := gateway.Upload(t, c, s.g.URL, data, name, "application/octet-stream", nil)
	if r.Status != want {
		t.Fatalf("upload %s: %d %s", name, r.Status, r.Body)
	}
	sum := blake3.Sum256(data)
	a := r.JSON(t)
	if a["hash"] != fmt.Sprintf("blake3:%x", sum) {
		t.Fatalf("upload %s: hash %v", name, a["hash"])
	}
	return a["id"].(string)
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// slowLink is a TCP proxy to a target that carries at most bps bytes per
// second in each direction of each connection.
type slowLink struct {
	ln     net.Listener
	target string
	bps    int

	mu       sync.Mutex
	accepted int
}

func newSlowLink(t *testing.T, target string, bps int) *slowLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, target: target, bps: bps}
	t.Cleanup(func() { ln.Close() })
	go l.serve()
	return l
}

func (l *slowLink) addr() string { return l.ln.Addr().String() }

func (l *slowLink) conns() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.accepted
}

func (l *slowLink) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		l.accepted++
		l.mu.Unlock()
		go l.carry(c)
	}
}

func (l *slowLink) carry(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", l.target)
	if err != nil {
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { l.copy(server, client); done <- struct{}{} }()
	go func() { l.copy(client, server); done <- struct{}{} }()
	<-done
}

// copy moves bytes from src to dst at the link's rate, in chunks of at
// most 32 KiB.
func (l *slowLink) copy(dst, src net.Conn) {
	const chunk = 32 << 10
	limit := rate.NewLimiter(rate.Limit(l.bps), chunk)
	buf := make([]byte, chunk)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if limit.WaitN(context.Background(), n) != nil {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
