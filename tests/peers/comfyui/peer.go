// Package comfyuipeer is a test-only ComfyUI server: the native HTTP routes
// and WebSocket frames a gateway uses (/object_info, /prompt, /queue,
// /interrupt, /history, /view, /upload/image, /ws) and its log API
// (/internal/logs, /internal/logs/raw, /internal/logs/subscribe and the
// "logs" socket message), running a small node set — the built-in image
// nodes (LoadImage, ImageInvert, SaveImage, …) plus SlowNode, TextOutput,
// MediaOutput, FailNode, PreviewNode and PrintNode — with
// switches for the failures real workers have. It is never linked into the
// product.
package comfyuipeer

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// Switches are the failure modes; change them with Peer.Set.
type Switches struct {
	// Slow delays every node by this much.
	Slow time.Duration
	// NodeErrors200 answers POST /prompt 200 with node_errors for the first
	// output node, and queues the prompt anyway (as ComfyUI does when other
	// outputs validated).
	NodeErrors200 bool
	// NodeErrors400 answers POST /prompt 400 prompt_outputs_failed_validation.
	NodeErrors400 bool
	// HistoryDelay writes a finished prompt's history this long after
	// execution_success (executing{node:null} follows the history).
	HistoryDelay time.Duration
	// RejectSockets answers /ws with 503 (a socket that cannot reconnect).
	RejectSockets bool
	// CloseSocketsOnAccept accepts each /ws upgrade and closes it at once,
	// like a proxy that drops upgraded connections.
	CloseSocketsOnAccept bool
	// OwnPromptIDs ignores the prompt_id a client sends and queues every
	// prompt under an id of its own, named in the answer, as ComfyUI did
	// before upstream commit 260a5ca5 (2025-07-14).
	OwnPromptIDs bool
	// AnswerDelay holds POST /prompt's answer this long after the prompt
	// was queued, so that its first events (or all of them) come first.
	AnswerDelay time.Duration
	// UnmatchedAnswers queues every prompt under an id of its own and
	// answers POST /prompt with another fresh id: a worker (or a proxy in
	// front of it) whose answers cannot be matched to its prompts.
	UnmatchedAnswers bool
	// DropAnswers queues the prompt and closes the connection instead of
	// answering POST /prompt (an answer lost on the way).
	DropAnswers bool
	// RefusePrompts answers POST /prompt 503 without queuing it, as a proxy
	// in front of a worker that is away does.
	RefusePrompts bool
	// PreviewImage, when set, is what PreviewNode sends as every preview
	// (a hostile worker's: a decompression bomb, say).
	PreviewImage []byte
}

// Options shape a peer at creation.
type Options struct {
	// OmitClasses are left out of /object_info and refused by /prompt.
	OmitClasses []string
	// InputDir, when set, stores uploaded inputs as real files under this
	// directory, laid out like ComfyUI's input folder
	// (<InputDir>/<subfolder>/<filename>), and the nodes and /view read them
	// from there; files removed from it are gone for the peer too. Empty
	// keeps inputs in memory.
	InputDir string
	// Models are the model files the loader nodes (CheckpointLoaderSimple,
	// LoraLoaderModelOnly, VAELoader) offer; empty leaves the loaders out of
	// the catalog. See models.go.
	Models []string
	// ModelLoad is what loading a model that is not in memory costs.
	ModelLoad time.Duration
	// ModelSlots is how many models memory holds. Default 2.
	ModelSlots int
	// Warm are the models in memory at start (the last is the most recent).
	Warm []string
	// ColdStart is how long after New the peer answers 503 to every
	// request (sockets included), like a ComfyUI still booting.
	ColdStart time.Duration
}

// Stats count what the peer was asked to do.
type Stats struct {
	Uploads, Prompts, Interrupts, QueueDeletes, HistoryDeletes, Sockets int
	// RefusedPrompts counts the prompts refused while shutting down.
	RefusedPrompts int
	// LogSubscribes counts PATCH /internal/logs/subscribe; LogMessages the
	// "logs" messages sent.
	LogSubscribes, LogMessages int
	// ModelLoads counts cold model loads; Frees the POST /free calls.
	ModelLoads, Frees int
	// Busy is the time spent executing prompts.
	Busy time.Duration
}

// Peer is one fake ComfyUI.
type Peer struct {
	// URL is the base URL, http://127.0.0.1:<port>.
	URL string

	srv     *httptest.Server
	catalog map[string]json.RawMessage

	mu      sync.Mutex
	sw      Switches
	stats   Stats
	crashed bool
	// stopping: Shutdown began; new prompts are refused.
	stopping bool
	sockets  map[string]*socket
	inputs   inputStore
	files    map[string][]byte // type/subfolder/name
	pending  []*prompt
	running  *prompt
	history  map[string]json.RawMessage
	number   int
	logs     logState
	// life ends on Crash or Restart, stopping the executor of that life.
	life   context.Context
	endLif context.CancelFunc
	wake   chan struct{}
	// models is the model memory; modelLoad the cost of a cold load.
	models    modelMemory
	modelLoad time.Duration
	// wsAttempts are the arrival times of the /ws requests.
	wsAttempts []time.Time
	// readyAt is when the cold start ends.
	readyAt time.Time
	// traced are the requests that carried a traceparent header.
	traced []Traced
}

// Traced is a request that carried a W3C traceparent header.
type Traced struct {
	Method, Path, TraceParent string
}

// TraceParents returns the requests that carried a traceparent, in order.
func (p *Peer) TraceParents() []Traced {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Traced(nil), p.traced...)
}

type prompt struct {
	id       string
	number   int
	clientID string
	raw      json.RawMessage
	nodes    map[string]node
	extra    json.RawMessage
	ctx      context.Context
	cancel   context.CancelFunc
}

type node struct {
	ClassType string         `json:"class_type"`
	Inputs    map[string]any `json:"inputs"`
}

type socket struct {
	conn *websocket.Conn
	meta bool
}

// New starts a peer; it is closed when the test ends.
func New(t testing.TB, opts Options) *Peer {
	t.Helper()
	p := &Peer{catalog: catalog(opts.OmitClasses), sockets: map[string]*socket{},
		inputs: inputStore{dir: opts.InputDir, mem: map[string][]byte{}},
		files:  map[string][]byte{}, history: map[string]json.RawMessage{}, modelLoad: opts.ModelLoad}
	p.models.slots = opts.ModelSlots
	if p.models.slots <= 0 {
		p.models.slots = 2
	}
	for _, m := range opts.Warm {
		p.models.use(m)
	}
	if len(opts.Models) > 0 {
		loaderCatalog(p.catalog, opts.Models)
	}
	p.readyAt = time.Now().Add(opts.ColdStart)
	p.srv = httptest.NewServer(p.routes())
	p.URL = p.srv.URL
	p.startLife()
	t.Cleanup(p.close)
	return p
}

func (p *Peer) startLife() {
	p.life, p.endLif = context.WithCancel(context.Background())
	p.wake = make(chan struct{}, 1)
	go p.executor(p.life, p.wake)
}

func (p *Peer) close() {
	p.mu.Lock()
	p.endLif()
	socks := p.takeSockets()
	p.mu.Unlock()
	closeSockets(socks)
	p.srv.CloseClientConnections()
	p.srv.Close()
}

// Set changes the switches.
func (p *Peer) Set(f func(*Switches)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.sw)
}

// Stats returns the counters.
func (p *Peer) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Running returns the id of the prompt executing now, or "".
func (p *Peer) Running() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.running == nil {
		return ""
	}
	return p.running.id
}

// SocketAttempts returns when each /ws request (a socket dial) arrived.
func (p *Peer) SocketAttempts() []time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]time.Time(nil), p.wsAttempts...)
}

// OpenSockets counts the sockets open now.
func (p *Peer) OpenSockets() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.sockets)
}

// HistoryIDs lists the prompt ids the history holds.
func (p *Peer) HistoryIDs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.history))
	for id := range p.history {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Inputs lists the staged input files as subfolder/name (with
// Options.InputDir, the files under that directory).
func (p *Peer) Inputs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inputs.list()
}

// Crash closes the listener and every connection and forgets everything:
// the URL stops answering for good.
func (p *Peer) Crash() {
	p.mu.Lock()
	p.crashed = true
	p.forget()
	socks := p.takeSockets()
	p.mu.Unlock()
	closeSockets(socks)
	p.srv.Listener.Close()
	p.srv.CloseClientConnections()
}

// Restart simulates a ComfyUI restart on the same address: the running
// prompt dies without an event, the queue and the in-memory history are
// lost, every socket is closed; uploaded inputs and outputs stay on disk.
func (p *Peer) Restart() {
	p.mu.Lock()
	p.forget()
	socks := p.takeSockets()
	p.startLife()
	p.mu.Unlock()
	closeSockets(socks)
}

// DropSockets closes every WebSocket; prompts keep running and clients may
// reconnect with the same clientId.
func (p *Peer) DropSockets() {
	p.mu.Lock()
	socks := p.takeSockets()
	p.mu.Unlock()
	closeSockets(socks)
}

// forget drops queue, running prompt and history. Called with mu held.
func (p *Peer) forget() {
	p.endLif()
	if p.running != nil {
		p.running.cancel()
		p.running = nil
	}
	p.pending = nil
	p.history = map[string]json.RawMessage{}
	p.logs = logState{} // the buffer and the subscriptions live in memory
	p.models.held = nil
}

func (p *Peer) takeSockets() []*socket {
	socks := make([]*socket, 0, len(p.sockets))
	for _, s := range p.sockets {
		socks = append(socks, s)
	}
	p.sockets = map[string]*socket{}
	return socks
}

func closeSockets(socks []*socket) {
	for _, s := range socks {
		s.conn.CloseNow()
	}
}

func (p *Peer) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /object_info", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, p.catalog) })
	mux.HandleFunc("GET /prompt", p.getPrompt)
	mux.HandleFunc("POST /prompt", p.postPrompt)
	mux.HandleFunc("GET /queue", p.getQueue)
	mux.HandleFunc("POST /queue", p.postQueue)
	mux.HandleFunc("POST /interrupt", p.postInterrupt)
	mux.HandleFunc("GET /history", p.getHistory)
	mux.HandleFunc("GET /history/{id}", p.getHistory)
	mux.HandleFunc("POST /history", p.postHistory)
	mux.HandleFunc("GET /view", p.view)
	mux.HandleFunc("POST /upload/image", p.upload)
	mux.HandleFunc("GET /ws", p.ws)
	mux.HandleFunc("POST /free", p.postFree)
	mux.HandleFunc("GET /internal/logs", p.getLogs)
	mux.HandleFunc("GET /internal/logs/raw", p.getRawLogs)
	mux.HandleFunc("PATCH /internal/logs/subscribe", p.subscribeLogs)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		crashed := p.crashed
		if tp := r.Header.Get("traceparent"); tp != "" {
			p.traced = append(p.traced, Traced{Method: r.Method, Path: r.URL.Path, TraceParent: tp})
		}
		p.mu.Unlock()
		if time.Now().Before(p.readyAt) {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		if crashed {
			// A connection accepted just before the crash: drop it.
			if hj, ok := w.(http.Hijacker); ok {
				if c, _, err := hj.Hijack(); err == nil {
					c.Close()
					return
				}
			}
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ws serves /ws?clientId=: a status frame first, then the events of the
// prompts submitted with this client id. The first client frame may
// announce supports_preview_metadata.
func (p *Peer) ws(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.wsAttempts = append(p.wsAttempts, time.Now())
	reject := p.sw.RejectSockets
	p.mu.Unlock()
	if reject {
		http.Error(w, "unavailable", http.StatusServiceUnavailable)
		return
	}
	clientID := r.URL.Query().Get("clientId")
	if clientID == "" {
		clientID = strings.ReplaceAll(newID(), "-", "")
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	p.mu.Lock()
	dropAtOnce := p.sw.CloseSocketsOnAccept
	if dropAtOnce {
		p.stats.Sockets++
	}
	p.mu.Unlock()
	if dropAtOnce {
		conn.CloseNow()
		return
	}
	s := &socket{conn: conn}
	p.mu.Lock()
	old := p.sockets[clientID]
	p.sockets[clientID] = s
	p.stats.Sockets++
	remaining := p.queueRemaining()
	p.mu.Unlock()
	if old != nil {
		old.conn.CloseNow()
	}
	p.sendTo(s, "status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": remaining}}, "sid": clientID})
	first := true
	for {
		_, data, err := conn.Read(context.Background())
		if err != nil {
			break
		}
		if first {
			first = false
			var msg struct {
				Type string `json:"type"`
				Data struct {
					Preview bool `json:"supports_preview_metadata"`
				} `json:"data"`
			}
			if json.Unmarshal(data, &msg) == nil && msg.Type == "feature_flags" {
				p.mu.Lock()
				s.meta = msg.Data.Preview
				p.mu.Unlock()
				p.sendTo(s, "feature_flags", map[string]any{"supports_preview_metadata": true, "max_upload_size": 100 << 20})
			}
		}
	}
	p.mu.Lock()
	if p.sockets[clientID] == s {
		delete(p.sockets, clientID)
	}
	p.mu.Unlock()
	conn.CloseNow()
}

func (p *Peer) sendTo(s *socket, typ string, data any) {
	b, _ := json.Marshal(map[string]any{"type": typ, "data": data})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.conn.Write(ctx, websocket.MessageText, b)
}

// send delivers a prompt's event to its client's socket only, as ComfyUI
// does; nothing is buffered for a client that is not connected.
func (p *Peer) send(clientID, typ string, data any) {
	p.mu.Lock()
	s := p.sockets[clientID]
	p.mu.Unlock()
	if s != nil && clientID != "" {
		p.sendTo(s, typ, data)
	}
}

func (p *Peer) sendBinary(clientID string, frame func(meta bool) []byte) {
	p.mu.Lock()
	s := p.sockets[clientID]
	meta := s != nil && s.meta
	p.mu.Unlock()
	if s == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.conn.Write(ctx, websocket.MessageBinary, frame(meta))
}

// broadcastStatus sends the queue size to every socket.
func (p *Peer) broadcastStatus() {
	p.mu.Lock()
	socks := make([]*socket, 0, len(p.sockets))
	for _, s := range p.sockets {
		socks = append(socks, s)
	}
	remaining := p.queueRemaining()
	p.mu.Unlock()
	for _, s := range socks {
		p.sendTo(s, "status", map[string]any{"status": map[string]any{"exec_info": map[string]any{"queue_remaining": remaining}}})
	}
}

func (p *Peer) queueRemaining() int {
	n := len(p.pending)
	if p.running != nil {
		n++
	}
	return n
}
