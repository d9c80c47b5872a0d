package rehost

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/storage"
)

// memKeeper keeps assets in memory.
type memKeeper struct {
	mu   sync.Mutex
	kept map[string][]byte
	in   map[string]assets.Stored
}

func (k *memKeeper) Keep(_ context.Context, account string, r io.Reader, in assets.Stored) (storage.Asset, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return storage.Asset{}, err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	id := storage.NewID()
	k.kept[id], k.in[id] = b, in
	return storage.Asset{ID: id, AccountID: account, SizeBytes: int64(len(b)), ContentType: in.ContentType}, nil
}

func newKeeper() *memKeeper {
	return &memKeeper{kept: map[string][]byte{}, in: map[string]assets.Stored{}}
}

func rule(t *testing.T, spec RuleSpec) *Rule {
	t.Helper()
	r, err := spec.Compile()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

var png = append([]byte("\x89PNG\r\n\x1a\n"), bytes.Repeat([]byte{7}, 100)...)

func idOf(t *testing.T, url string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(url, "https://gw.test/api/v2/assets/")
	id, ok2 := strings.CutSuffix(rest, "/content")
	if !ok || !ok2 {
		t.Fatalf("%q is not a content URL", url)
	}
	return id
}

func TestRewriteCopiesURLAndBase64(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(png)
	}))
	defer srv.Close()
	k := newKeeper()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := New(Config{Assets: k, AllowPrivate: true, Now: func() time.Time { return now }})
	body := `{"id":"x","result":{"sample":"` + srv.URL + `/r.png","seed":12345678901234567890},` +
		`"images":["data:image/webp;base64,` + base64.StdEncoding.EncodeToString([]byte("RIFF....WEBP")) + `","` +
		base64.StdEncoding.EncodeToString(png) + `"]}`
	okCount, bytesBefore := counterValue(metrics.RouterRehostCopies.WithLabelValues("base64", "ok")), counterValue(metrics.RouterRehostBytes)
	out := c.Rewrite(context.Background(), rule(t, RuleSpec{URLs: []string{"result.sample"}, Base64: []string{"images[*]"}, Lifetime: "2h"}),
		Target{Account: "ws1", RequestID: "req-1", ContentBase: "https://gw.test/api/v2/"}, []byte(body))
	if out.Copied != 3 || out.Failed != 0 {
		t.Fatalf("copied %d failed %d", out.Copied, out.Failed)
	}
	if n := counterValue(metrics.RouterRehostCopies.WithLabelValues("base64", "ok")) - okCount; n != 2 {
		t.Errorf("%v base64 copies counted, want 2", n)
	}
	if n := counterValue(metrics.RouterRehostBytes) - bytesBefore; n != float64(2*len(png)+len("RIFF....WEBP")) {
		t.Errorf("%v bytes counted", n)
	}
	var doc struct {
		Result struct {
			Sample string
			Seed   json.Number
		}
		Images []string
	}
	if err := json.Unmarshal(out.Body, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Result.Seed != "12345678901234567890" {
		t.Errorf("a number changed: %s", doc.Result.Seed)
	}
	for _, tc := range []struct {
		url   string
		bytes []byte
		ct    string
	}{{doc.Result.Sample, png, "image/png"}, {doc.Images[0], []byte("RIFF....WEBP"), "image/webp"}, {doc.Images[1], png, "image/png"}} {
		id := idOf(t, tc.url)
		if !bytes.Equal(k.kept[id], tc.bytes) || k.in[id].ContentType != tc.ct {
			t.Errorf("%s: kept %q as %q", tc.url, k.kept[id], k.in[id].ContentType)
		}
		in := k.in[id]
		if !in.ExpiresAt.Equal(now.Add(2*time.Hour)) || len(in.Tags) != 2 || in.Tags[1] != "router_call:req-1" ||
			!strings.HasPrefix(in.FilePath, "router/req-1/") {
			t.Errorf("%s: stored as %+v", tc.url, in)
		}
	}
}

// countingListener counts connections to an address.
func countingListener(t *testing.T, handler http.Handler) (url string, conns *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = new(atomic.Int64)
	srv := &http.Server{Handler: handler, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), conns
}

func TestRewriteFailuresKeepThePartnersValue(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(png) })
	loop, loopConns := countingListener(t, ok)
	big, _ := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush() // no Content-Length: the limit is met while reading
		for range 5 {
			w.Write(bytes.Repeat([]byte{1}, 400))
		}
	}))
	slow, _ := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	gone, _ := countingListener(t, http.NotFoundHandler())
	cases := []struct {
		name string
		cfg  Config
		url  string
	}{
		{"loopback refused", Config{}, loop + "/r.png"},
		{"localhost name refused", Config{}, strings.Replace(loop, "127.0.0.1", "localhost", 1) + "/r.png"},
		{"too large", Config{AllowPrivate: true, MaxBytes: 1000}, big + "/r.png"},
		{"timeout", Config{AllowPrivate: true, Timeout: 300 * time.Millisecond}, slow + "/r.png"},
		{"error status", Config{AllowPrivate: true}, gone + "/r.png"},
		{"not http", Config{AllowPrivate: true}, "file:///etc/passwd"},
	}
	reasons := map[string]string{"loopback refused": "refused_address", "localhost name refused": "refused_address",
		"too large": "too_large", "timeout": "timeout", "error status": "bad_result", "not http": "bad_result"}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			counter := metrics.RouterRehostCopies.WithLabelValues("url", reasons[tc.name])
			before := counterValue(counter)
			defer func() {
				if got := counterValue(counter) - before; got != 1 {
					t.Errorf("%s copies counted %v times", reasons[tc.name], got)
				}
			}()
			k := newKeeper()
			tc.cfg.Assets = k
			c := New(tc.cfg)
			body := `{"result":{"sample":"` + tc.url + `"}}`
			out := c.Rewrite(context.Background(), rule(t, RuleSpec{URLs: []string{"result.sample"}}),
				Target{Account: "ws1", RequestID: "r", ContentBase: "https://gw.test/api/v2"}, []byte(body))
			if out.Failed != 1 || out.Copied != 0 || string(out.Body) != body || len(k.kept) != 0 {
				t.Fatalf("failed %d copied %d body %s kept %d", out.Failed, out.Copied, out.Body, len(k.kept))
			}
		})
	}
	if n := loopConns.Load(); n != 0 {
		t.Fatalf("%d connections reached the refused address", n)
	}
	// The same address is fetched when the operator allows it.
	k := newKeeper()
	out := New(Config{Assets: k, AllowPrivate: true}).Rewrite(context.Background(), rule(t, RuleSpec{URLs: []string{"u"}}),
		Target{Account: "ws1", RequestID: "r", ContentBase: "https://gw.test/api/v2"}, []byte(`{"u":"`+loop+`/r.png"}`))
	if out.Copied != 1 || loopConns.Load() == 0 {
		t.Fatalf("allowed fetch: copied %d, connections %d", out.Copied, loopConns.Load())
	}
}

func TestClientRefusesAtDial(t *testing.T) {
	inner, innerConns := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(png) }))
	// The check is the dialer's: every connection the client opens, for a
	// redirect hop too, is refused before it is made.
	c := New(Config{Assets: newKeeper()})
	req, _ := http.NewRequest(http.MethodGet, inner, nil)
	if _, err := c.client.Do(req); err == nil || !isRefusal(err) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	if innerConns.Load() != 0 {
		t.Fatal("a connection reached the refused address")
	}
}

func TestRefusedRanges(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "::1", "fe80::1",
		"fc00::1", "100.64.0.1", "0.0.0.0", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "224.0.0.1"} {
		if err := dialControl("tcp", net.JoinHostPort(a, "80"), nil); !isRefusal(err) {
			t.Errorf("%s admitted", a)
		}
	}
	for _, a := range []string{"8.8.8.8", "1.1.1.1", "2606:4700::1111"} {
		if err := dialControl("tcp", net.JoinHostPort(a, "443"), nil); err != nil {
			t.Errorf("%s refused: %v", a, err)
		}
	}
}

// counterValue reads a counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

// TestRedirectIsCheckedAgain: a redirect from an admitted address to a
// refused one is refused when its connection is dialled (here the check
// refuses only the second listener's port, standing in for a private
// address behind a public one).
func TestRedirectIsCheckedAgain(t *testing.T) {
	inner, innerConns := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(png) }))
	outer, outerConns := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner+"/r.png", http.StatusFound)
	}))
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(inner, "http://"))
	c := New(Config{Assets: newKeeper()})
	c.client = newClientWith(func(_, address string, _ syscall.RawConn) error {
		if _, p, _ := net.SplitHostPort(address); p == port {
			return ErrRefusedAddress
		}
		return nil
	}, time.Second)
	out := c.Rewrite(context.Background(), rule(t, RuleSpec{URLs: []string{"u"}}),
		Target{Account: "ws1", RequestID: "r", ContentBase: "https://gw.test/api/v2"}, []byte(`{"u":"`+outer+`/r.png"}`))
	if out.Failed != 1 || outerConns.Load() != 1 || innerConns.Load() != 0 {
		t.Fatalf("failed %d, connections outer %d inner %d", out.Failed, outerConns.Load(), innerConns.Load())
	}
	// A redirect to another scheme is not followed.
	ftp, _ := countingListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "ftp://example.com/r.png", http.StatusFound)
	}))
	c = New(Config{Assets: newKeeper(), AllowPrivate: true})
	if out := c.Rewrite(context.Background(), rule(t, RuleSpec{URLs: []string{"u"}}),
		Target{Account: "ws1", RequestID: "r", ContentBase: "https://gw.test/api/v2"}, []byte(`{"u":"`+ftp+`/r.png"}`)); out.Failed != 1 {
		t.Fatalf("ftp redirect: failed %d", out.Failed)
	}
}
