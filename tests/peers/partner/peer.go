package partner

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Kind names a peer protocol. It is used by StartStandalone.
type Kind string

// The peer kinds.
const (
	KindSyncJSON  Kind = "sync-json"
	KindSyncBytes Kind = "sync-bytes"
	KindFalQueue  Kind = "fal-queue"
	KindBFL       Kind = "bfl"
	KindConstant  Kind = "constant"
)

// DefaultSecret is the secret every peer expects unless WithAuth says
// otherwise. Each kind puts it in the partner's own header:
//
//	sync JSON   Authorization: Bearer peer-secret
//	sync bytes  xi-api-key: peer-secret
//	fal queue   Authorization: Key peer-secret
//	BFL         x-key: peer-secret
//	constant    (no check)
const DefaultSecret = "peer-secret"

// maxBody bounds what a peer reads from a request body.
const maxBody = 16 << 20

// maxHistory bounds how many submissions a peer keeps for Submitted.
const maxHistory = 1024

// Recorded is one request as the peer received it.
type Recorded struct {
	Method string
	Host   string // Host header as received
	Path   string // URL path without the query
	Query  string // raw query
	Header http.Header
	Body   []byte
}

// Peer is a running partner server. All methods are safe for concurrent use.
type Peer struct {
	// URL is the base address, http://127.0.0.1:port, with no trailing slash.
	URL string
	// Kind is the protocol this peer speaks.
	Kind Kind

	srv       *httptest.Server
	closing   chan struct{}
	closeOnce sync.Once

	mu         sync.Mutex
	cfg        config
	constAuth  atomic.Pointer[[2]string] // constant kind: auth read without the lock
	jobs       map[string]*job
	last       Recorded
	lastSubmit Recorded
	submitted  []Recorded

	requests    atomic.Int64
	submissions atomic.Int64
	cancels     atomic.Int64
	open        atomic.Int64
	inFlight    atomic.Int64
	maxInFlight atomic.Int64
}

// NewSyncJSON starts a synchronous JSON model peer (fal.run or OpenAI
// Images style). It answers POST to any path with 200 application/json:
//
//	{"images":[{"url":…,"content_type":"image/png","width":1024,"height":1024}],
//	 "seed":42,"prompt":<input prompt>,"timings":{"inference":0.01}}
//
// The input's "prompt" is echoed, and so is "seed" when given.
func NewSyncJSON(t testing.TB, opts ...Option) *Peer { return newForTest(t, KindSyncJSON, opts) }

// NewSyncBytes starts a synchronous peer answering raw audio/mpeg bytes
// (ElevenLabs text-to-speech style). It answers POST to any path with an ID3
// header followed by the input's "text" field, so tests can check
// passthrough.
func NewSyncBytes(t testing.TB, opts ...Option) *Peer { return newForTest(t, KindSyncBytes, opts) }

// NewFalQueue starts a fal queue API peer. See fal.go for the routes.
func NewFalQueue(t testing.TB, opts ...Option) *Peer { return newForTest(t, KindFalQueue, opts) }

// NewBFL starts a Black Forest Labs API peer. See bfl.go for the routes.
func NewBFL(t testing.TB, opts ...Option) *Peer { return newForTest(t, KindBFL, opts) }

// NewConstant starts a benchmark peer that answers every request at once with
// ConstantBody (200 application/json). It records no requests and checks no
// credential unless WithAuth is given. Only the counters work; other switches
// are ignored. A *testing.B can be passed as t.
func NewConstant(t testing.TB, opts ...Option) *Peer { return newForTest(t, KindConstant, opts) }

// StartStandalone starts a peer without a testing.TB: for benchmark drivers
// and TestMain. addr is a host:port on 127.0.0.1 ("127.0.0.1:0" picks a free
// port). The caller must Close the peer.
func StartStandalone(addr string, kind Kind, opts ...Option) (*Peer, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("partner: bad addr %q: %w", addr, err)
	}
	if host != "127.0.0.1" {
		return nil, fmt.Errorf("partner: addr %q must be on 127.0.0.1", addr)
	}
	return start(addr, kind, opts)
}

func newForTest(t testing.TB, kind Kind, opts []Option) *Peer {
	t.Helper()
	p, err := start("127.0.0.1:0", kind, opts)
	if err != nil {
		t.Fatalf("partner: %v", err)
	}
	t.Cleanup(p.Close)
	return p
}

func start(addr string, kind Kind, opts []Option) (*Peer, error) {
	p := &Peer{Kind: kind, closing: make(chan struct{}), jobs: map[string]*job{}}
	switch kind {
	case KindSyncJSON:
		p.cfg.authHeader, p.cfg.authValue = "Authorization", "Bearer "+DefaultSecret
	case KindSyncBytes:
		p.cfg.authHeader, p.cfg.authValue = "xi-api-key", DefaultSecret
	case KindFalQueue:
		p.cfg.authHeader, p.cfg.authValue = "Authorization", "Key "+DefaultSecret
	case KindBFL:
		p.cfg.authHeader, p.cfg.authValue = "x-key", DefaultSecret
	case KindConstant:
	default:
		return nil, fmt.Errorf("partner: unknown kind %q", kind)
	}
	for _, o := range opts {
		o(&p.cfg)
	}
	p.constAuth.Store(&[2]string{p.cfg.authHeader, p.cfg.authValue})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("partner: listen %s: %w", addr, err)
	}
	var h http.Handler = p
	if kind == KindConstant {
		h = http.HandlerFunc(p.serveConstant)
	}
	p.srv = httptest.NewUnstartedServer(h)
	p.srv.Listener.Close()
	p.srv.Listener = ln
	p.srv.Start()
	p.URL = p.srv.URL
	return p, nil
}

// Close releases hanging requests (their connections are dropped), stops
// the server and waits for its handlers. It is idempotent and is registered
// with t.Cleanup by the constructors.
func (p *Peer) Close() {
	p.closeOnce.Do(func() {
		close(p.closing)
		p.srv.CloseClientConnections()
		p.srv.Close()
	})
}

// SetOptions applies more switches on top of the current ones. Start with
// WithNoFaults to reset.
func (p *Peer) SetOptions(opts ...Option) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range opts {
		o(&p.cfg)
	}
	p.constAuth.Store(&[2]string{p.cfg.authHeader, p.cfg.authValue})
}

// Credential returns the header name and value the peer currently requires.
// An empty name means no check.
func (p *Peer) Credential() (header, value string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cfg.authHeader, p.cfg.authValue
}

// Submissions counts accepted work. Sync peers count every authenticated POST
// that reached the model, including ones the model refused. fal and BFL count
// submits answered with a request id. Requests refused by WithStatus, auth, a
// hang or a BFL submit-time 422 are not counted.
func (p *Peer) Submissions() int { return int(p.submissions.Load()) }

// Requests counts every HTTP request the peer received, media fetches
// included.
func (p *Peer) Requests() int { return int(p.requests.Load()) }

// OpenRequests is the number of HTTP requests being handled right now
// (hanging ones included).
func (p *Peer) OpenRequests() int { return int(p.open.Load()) }

// InFlight is the number of calls in progress. For sync peers this is a
// POST being handled. For queue peers it is a job from its accepted submit
// until the peer delivers its terminal answer (fal: response_url answered
// with the result or the error; BFL: a poll answered with a terminal status)
// or until it is cancelled. A job whose result is never collected stays in
// flight.
func (p *Peer) InFlight() int { return int(p.inFlight.Load()) }

// MaxInFlight is the highest InFlight seen since the peer started.
func (p *Peer) MaxInFlight() int { return int(p.maxInFlight.Load()) }

// Cancels counts accepted cancellations (fal 202 CANCELLATION_REQUESTED).
func (p *Peer) Cancels() int { return int(p.cancels.Load()) }

// LastRequest returns the most recent API request (any method, media fetches
// excluded). It is zero if there has been none.
func (p *Peer) LastRequest() Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last
}

// LastSubmit returns the most recent authenticated POST.
func (p *Peer) LastSubmit() Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lastSubmit
}

// Submitted returns the authenticated POSTs in arrival order, at most the
// last 1024.
func (p *Peer) Submitted() []Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Recorded(nil), p.submitted...)
}

// CompleteAll finishes every queued job that is still running, as if its
// latency had elapsed now. WithNeverComplete jobs are included.
func (p *Peer) CompleteAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, j := range p.jobs {
		j.forced = true
	}
}

func (p *Peer) enter() {
	n := p.inFlight.Add(1)
	for {
		m := p.maxInFlight.Load()
		if n <= m || p.maxInFlight.CompareAndSwap(m, n) {
			return
		}
	}
}

func (p *Peer) leave() { p.inFlight.Add(-1) }

// ServeHTTP reads and records the request, applies hang, auth and status in
// that order, then hands off to the kind's protocol.
func (p *Peer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.requests.Add(1)
	p.open.Add(1)
	defer p.open.Add(-1)
	if r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, mediaPrefix) {
		serveMedia(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody))
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	rec := Recorded{Method: r.Method, Host: r.Host, Path: r.URL.Path, Query: r.URL.RawQuery, Header: r.Header.Clone(), Body: body}
	p.mu.Lock()
	p.last = rec
	cfg := p.cfg
	p.mu.Unlock()

	if cfg.hang {
		p.hang(r)
	}
	if cfg.authHeader != "" && r.Header.Get(cfg.authHeader) != cfg.authValue {
		p.writeUnauthorized(w)
		return
	}
	if r.Method == http.MethodPost {
		p.mu.Lock()
		p.lastSubmit = rec
		if len(p.submitted) == maxHistory {
			p.submitted = p.submitted[1:]
		}
		p.submitted = append(p.submitted, rec)
		p.mu.Unlock()
	}
	if cfg.status != 0 {
		p.writeStatus(w, cfg.status)
		return
	}
	switch p.Kind {
	case KindSyncJSON, KindSyncBytes:
		p.serveSync(w, r, body, cfg)
	case KindFalQueue:
		p.serveFal(w, r, body, cfg)
	case KindBFL:
		p.serveBFL(w, r, body, cfg)
	}
}

// hang blocks until the client goes away or the peer closes, then drops the
// connection without an answer.
func (p *Peer) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-p.closing:
	}
	panic(http.ErrAbortHandler)
}

// sleep waits d. It reports false if the client went away or the peer closed
// first.
func (p *Peer) sleep(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	case <-p.closing:
		return false
	}
}

func (p *Peer) writeUnauthorized(w http.ResponseWriter) {
	switch p.Kind {
	case KindSyncJSON, KindConstant:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"error": map[string]any{
			"message": "Incorrect API key provided.", "type": "invalid_request_error", "code": "invalid_api_key"}})
	case KindSyncBytes:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"detail": map[string]any{
			"status": "invalid_api_key", "message": "Invalid API key"}})
	case KindFalQueue:
		writeJSON(w, http.StatusUnauthorized, map[string]any{"detail": "Authentication is required to access this application."})
	case KindBFL:
		writeJSON(w, http.StatusForbidden, map[string]any{"detail": "Not authenticated: invalid or missing x-key"})
	}
}

// writeStatus answers code with the body the partner sends for it.
func (p *Peer) writeStatus(w http.ResponseWriter, code int) {
	switch p.Kind {
	case KindSyncJSON:
		typ := "invalid_request_error"
		if code >= 500 {
			typ = "server_error"
		}
		writeJSON(w, code, map[string]any{"error": map[string]any{
			"message": http.StatusText(code), "type": typ, "code": nil}})
	case KindSyncBytes:
		writeJSON(w, code, map[string]any{"detail": map[string]any{
			"status": elevenStatus(code), "message": http.StatusText(code)}})
	case KindFalQueue:
		writeFalRequestError(w, code)
	case KindBFL:
		writeJSON(w, code, map[string]any{"detail": bflStatusDetail(code)})
	}
}

// elevenStatus is ElevenLabs' detail.status for an HTTP status.
func elevenStatus(code int) string {
	switch code {
	case http.StatusTooManyRequests:
		return "too_many_concurrent_requests"
	case http.StatusPaymentRequired, http.StatusUnauthorized:
		return "quota_exceeded"
	case http.StatusServiceUnavailable:
		return "system_busy"
	}
	return "internal_server_error"
}
