package comfyui

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/tracing"
	"github.com/comfygate/comfygate/internal/workflow"
)

var errPoolClosed = errors.New("comfyui: pool closed")

// wsReadLimit bounds one WebSocket frame; previews of large images are
// several megabytes.
const wsReadLimit = 64 << 20

// worker is one ComfyUI server: its socket, health, catalog and the
// attempts this pool runs on it.
type worker struct {
	pool *Pool
	cfg  WorkerConfig
	base *url.URL
	// source is where it came from (sourceStatic, sourceAdmin, or a DNS
	// source's key); ctx ends when it leaves the pool.
	source string
	idx    int // order of joining, the tie-break between equals
	ctx    context.Context
	stop   context.CancelFunc
	// clientID is this worker connection's stable WebSocket session id; every
	// prompt is submitted with it so that its events come to our socket.
	clientID string
	http     *http.Client
	log      *zap.Logger
	// firstTry is closed after the first connection attempt, so that Catalog
	// can wait for it at startup.
	firstTry  chan struct{}
	firstOnce sync.Once

	mu       sync.Mutex
	healthy  bool
	draining bool
	// stopping: the worker announced its shutdown (see shutdown.go); it
	// takes no new job until it is seen down and back.
	stopping bool
	// drainedBy is what removed a draining worker (a source name).
	drainedBy  string
	seenDown   bool // a dial failed since the shutdown notice
	lastOK     time.Time
	catalog    workflow.Catalog
	objectInfo map[string]json.RawMessage // the catalog as the worker sent it, per class
	catalogAt  time.Time
	// refreshEvery is when the catalog is next re-read after catalogAt:
	// RefreshInterval jittered, so that workers refresh spread out.
	refreshEvery   time.Duration
	queueRemaining int
	inflight       int
	// models are the models its recent executions loaded (model affinity).
	models modelLRU
	// starts are when its attempts in flight took their slots, oldest first.
	starts   []time.Time
	attempts map[string]*attempt
	// current is the prompt the worker executes now, the owner of
	// unattributed (type 1) preview frames.
	current string
	// lastEnded is the prompt whose final executing event came last: the
	// owner of the next timing line in the worker's log (see logs.go).
	lastEnded string
	// logsWanted is set once an attempt captures the run log; the session
	// is subscribed to the worker's log stream from then on.
	logsWanted atomic.Bool

	// Health beyond answering (see health.go). reason is why the worker is
	// not healthy; socketDown: its socket ended without a shutdown notice
	// (or a dial was refused) and no dial has succeeded since; broken: its
	// answers could not be matched to its prompts (brokenDown: a dial
	// failed since); handedOn: the attempts of the current outage were
	// handed on.
	reason     string
	socketDown bool
	broken     string
	brokenDown bool
	handedOn   bool
	// conn numbers the socket now open (0: none), so that an attempt can
	// tell whether the socket it submitted on stayed up; conns counts them.
	conn, conns uint64
	// submitting counts the attempts waiting for POST /prompt's answer;
	// meanwhile the messages for prompt ids no attempt claims are kept in
	// unclaimed (see match.go).
	submitting int
	unclaimed  map[string][]event
	unclaimedN int
}

func newWorker(p *Pool, idx int, cfg WorkerConfig, source string) (*worker, error) {
	base, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil {
		return nil, err
	}
	ctx, stop := context.WithCancel(p.ctx)
	return &worker{
		source:   source,
		idx:      idx,
		ctx:      ctx,
		stop:     stop,
		pool:     p,
		cfg:      cfg,
		base:     base,
		clientID: "comfygate-" + uuid.NewString(),
		http:     &http.Client{},
		log:      p.logger.With(zap.String("worker", base.Redacted()), zap.Int("worker_index", idx)),
		firstTry: make(chan struct{}),
		attempts: map[string]*attempt{},
		models:   modelLRU{size: p.cfg.AffinityModels},
		reason:   "not connected yet",
	}, nil
}

// endpoint returns the URL of a route with a query.
func (w *worker) endpoint(route string, query url.Values) string {
	u := *w.base
	u.Path = strings.TrimRight(u.Path, "/") + route
	u.RawQuery = query.Encode()
	return u.String()
}

func (w *worker) objectInfoIfHealthy() (map[string]json.RawMessage, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.objectInfo, w.healthy
}

func (w *worker) catalogIfHealthy() (workflow.Catalog, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.catalog, w.healthy
}

// reserve takes a slot for a job that loads models, and counts them among
// the worker's recent ones.
func (w *worker) reserve(models []string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.healthy || !w.takesJobs() || w.inflight >= w.cfg.Concurrency {
		return false
	}
	w.inflight++
	w.starts = append(w.starts, time.Now())
	w.models.use(models)
	return true
}

// forgetModels empties the worker's recent models: after a restart or a
// /free, nothing is known to be loaded.
func (w *worker) forgetModels() {
	w.mu.Lock()
	w.models.reset()
	w.mu.Unlock()
	w.pool.reindex(w)
}

func (w *worker) release() {
	w.mu.Lock()
	w.inflight--
	if len(w.starts) > 0 {
		w.starts = w.starts[1:]
	}
	drained := w.draining && w.inflight == 0
	w.mu.Unlock()
	if drained {
		w.pool.retire(w)
	}
	w.pool.touch(w)
}

func (w *worker) register(a *attempt) {
	w.mu.Lock()
	w.attempts[a.promptID] = a
	w.mu.Unlock()
}

func (w *worker) unregister(a *attempt) {
	w.mu.Lock()
	delete(w.attempts, a.promptID)
	if w.current == a.promptID {
		w.current = ""
	}
	w.mu.Unlock()
}

// connectLoop keeps the worker's socket open, reconnecting with backoff.
// Every (re)connect re-reads /object_info and asks the running attempts to
// reconcile what they may have missed while the socket was down.
func (w *worker) connectLoop(ctx context.Context) {
	backoff := 100 * time.Millisecond
	reconnect := false
	for ctx.Err() == nil {
		// Every worker of the pool dials through one limiter, so a pool
		// whose sockets all dropped at once (a network blip) reconnects at a
		// bounded rate instead of in a burst.
		if w.pool.dials.Wait(ctx) != nil {
			break
		}
		conn, err := w.dial(ctx)
		if err == nil {
			if err = w.refreshCatalog(ctx); err != nil {
				conn.CloseNow()
			}
		}
		if err != nil {
			w.firstOnce.Do(func() { close(w.firstTry) })
			if ctx.Err() != nil {
				return
			}
			w.dialFailed(err, reconnect)
			w.markFailure(err)
			w.log.Debug("connecting to worker", zap.Error(err))
			if !reconnectSleep(ctx, equalJitter(backoff)) {
				return
			}
			backoff = min(backoff*2, w.pool.cfg.ReconnectMax)
			continue
		}
		if reconnect {
			// A restarted ComfyUI has an empty memory; a socket that only
			// dropped cannot be told apart from one, so forget either way.
			w.forgetModels()
		}
		reconnect = true
		w.dialed()
		w.socketUp()
		w.markOK()
		w.firstOnce.Do(func() { close(w.firstTry) })
		if w.logsWanted.Load() {
			w.subscribeLogs(ctx)
		}
		w.broadcast(event{kind: evReconnected})
		connected := time.Now()
		stopPings := w.keepPinging(ctx, conn)
		err = w.readLoop(ctx, conn)
		stopPings()
		conn.CloseNow()
		if ctx.Err() != nil {
			w.broadcast(event{kind: evLost, err: errPoolClosed})
			return
		}
		w.log.Warn("worker socket closed; reconnecting", zap.Error(err))
		if shutdownClose(err) {
			w.socketEnded("")
			w.shutdownNotice("socket closed with " + websocket.CloseStatus(err).String())
		} else {
			// No notice: a killed process, a crashed host, a cut link. Out
			// of rotation until a dial succeeds (see health.go).
			w.socketEnded(fmt.Sprintf("its socket closed without a shutdown notice (%v)", err))
		}
		// A socket that stayed up a while starts the backoff over; one that
		// drops at once (a proxy closing upgraded sockets, an oversized
		// frame) keeps growing it, so a reconnect never becomes a tight
		// loop of dials and /object_info reads against the worker.
		if time.Since(connected) >= stableConnection {
			backoff = 100 * time.Millisecond
		}
		if !reconnectSleep(ctx, equalJitter(backoff)) {
			w.broadcast(event{kind: evLost, err: errPoolClosed})
			return
		}
		backoff = min(backoff*2, w.pool.cfg.ReconnectMax)
	}
}

// Socket liveness. A socket whose peer vanished without a FIN (a worker
// host that died, a NAT or load balancer that forgot the flow) never fails
// a read, so progress and previews would stop without the pool noticing.
// ComfyUI's server (aiohttp) answers pings on its own; one unanswered
// within pingTimeout closes the socket and the reconnect path takes over.
var (
	pingInterval = 15 * time.Second
	pingTimeout  = 10 * time.Second
)

// keepPinging pings conn every pingInterval until the returned stop is
// called; a failed ping closes conn, which ends readLoop.
func (w *worker) keepPinging(ctx context.Context, conn *websocket.Conn) (stop func()) {
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			// Jittered, so that a hundred sockets opened together do not
			// ping in step.
			t := time.NewTimer(jittered(pingInterval))
			select {
			case <-pctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			tctx, tcancel := context.WithTimeout(pctx, pingTimeout)
			err := conn.Ping(tctx)
			tcancel()
			if err != nil {
				if pctx.Err() == nil {
					w.log.Warn("worker socket did not answer a ping; reconnecting", zap.Error(err))
					conn.CloseNow()
				}
				return
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// stableConnection is how long a socket must stay up for its drop to start
// the reconnect backoff over.
const stableConnection = 30 * time.Second

func (w *worker) broadcast(e event) {
	w.mu.Lock()
	as := make([]*attempt, 0, len(w.attempts))
	for _, a := range w.attempts {
		as = append(as, a)
	}
	w.mu.Unlock()
	for _, a := range as {
		a.push(e)
	}
}

func (w *worker) dial(ctx context.Context) (*websocket.Conn, error) {
	u := *w.base
	switch u.Scheme {
	case "https":
		u.Scheme = "wss"
	default:
		u.Scheme = "ws"
	}
	u.Path = strings.TrimRight(u.Path, "/") + "/ws"
	u.RawQuery = url.Values{"clientId": {w.clientID}}.Encode()
	ctx, span := tracing.Start(ctx, "comfyui.connect", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(tracing.AttrWorker.String(w.base.Host)))
	defer span.End()
	dctx, cancel := context.WithTimeout(ctx, w.pool.cfg.RequestTimeout)
	defer cancel()
	header := w.headers()
	tracing.Inject(ctx, header)
	conn, _, err := websocket.Dial(dctx, u.String(), &websocket.DialOptions{HTTPHeader: header, HTTPClient: w.http})
	if err != nil {
		tracing.Fail(span, err)
		return nil, fmt.Errorf("websocket: %w", err)
	}
	conn.SetReadLimit(wsReadLimit)
	hello := []byte(`{"type":"feature_flags","data":{"supports_preview_metadata":true}}`)
	if err := conn.Write(dctx, websocket.MessageText, hello); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("websocket feature_flags: %w", err)
	}
	if err := w.awaitStatus(dctx, conn); err != nil {
		conn.CloseNow()
		return nil, fmt.Errorf("websocket status: %w", err)
	}
	return conn, nil
}

// awaitStatus reads the session's messages up to its first "status".
// ComfyUI sends it right after it registers the socket under the client
// id, and only a registered session keeps a log subscription (a flush
// drops subscribers without a socket), so the session counts as open, and
// may be subscribed, only from then on.
func (w *worker) awaitStatus(ctx context.Context, conn *websocket.Conn) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		if w.route(typ, data) == "status" {
			return nil
		}
	}
}

func (w *worker) headers() http.Header {
	h := http.Header{}
	for k, v := range w.cfg.Headers {
		h.Set(k, v)
	}
	return h
}

// readLoop routes frames to attempts until the socket fails.
func (w *worker) readLoop(ctx context.Context, conn *websocket.Conn) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		w.markOK()
		w.route(typ, data)
	}
}

// route hands one frame to the attempts it concerns and returns a text
// message's type ("" for a binary frame or one that is not JSON).
func (w *worker) route(typ websocket.MessageType, data []byte) string {
	if typ == websocket.MessageBinary {
		w.routeBinary(data)
		return ""
	}
	var msg struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
	}
	if json.Unmarshal(data, &msg) != nil {
		return ""
	}
	w.routeText(msg.Type, msg.Data)
	return msg.Type
}

func (w *worker) routeText(typ string, data json.RawMessage) {
	if typ == "logs" {
		w.routeLogs(data)
		return
	}
	var head struct {
		PromptID string  `json:"prompt_id"`
		Node     *string `json:"node"`
		Status   struct {
			ExecInfo struct {
				QueueRemaining int `json:"queue_remaining"`
			} `json:"exec_info"`
		} `json:"status"`
	}
	_ = json.Unmarshal(data, &head)
	w.mu.Lock()
	switch typ {
	case "status":
		w.queueRemaining = head.Status.ExecInfo.QueueRemaining
	case "execution_start":
		w.current = head.PromptID
	case "executing":
		if head.Node == nil && w.current == head.PromptID {
			w.current = ""
		}
		if head.Node == nil && head.PromptID != "" {
			w.lastEnded = head.PromptID
		}
	}
	if head.PromptID != "" {
		// Pushed under mu, so that claim (match.go) hands an attempt the
		// messages kept for it before any later one.
		e := event{kind: evMessage, typ: typ, data: data}
		if a := w.attempts[head.PromptID]; a != nil {
			a.push(e)
		} else {
			w.keepUnclaimed(head.PromptID, e)
		}
	}
	w.mu.Unlock()
	if typ == "status" {
		w.pool.reindex(w) // its load changed
	}
}

// routeBinary decodes preview frames: type 1 (u32 image type, bytes) goes
// to the prompt executing now; type 4 (u32 length, metadata JSON, bytes)
// names its prompt.
func (w *worker) routeBinary(data []byte) {
	if len(data) < 8 {
		return
	}
	var promptID, nodeID, contentType string
	var img []byte
	switch binary.BigEndian.Uint32(data) {
	case 1:
		contentType = imageTypeName(binary.BigEndian.Uint32(data[4:]))
		img = data[8:]
		w.mu.Lock()
		promptID = w.current
		w.mu.Unlock()
	case 4:
		n := int(binary.BigEndian.Uint32(data[4:]))
		if n < 0 || 8+n > len(data) {
			return
		}
		var meta struct {
			NodeID    string `json:"node_id"`
			PromptID  string `json:"prompt_id"`
			ImageType string `json:"image_type"`
		}
		if json.Unmarshal(data[8:8+n], &meta) != nil {
			return
		}
		promptID, nodeID, contentType, img = meta.PromptID, meta.NodeID, meta.ImageType, data[8+n:]
		if contentType == "" {
			contentType = "image/png"
		}
	default:
		return
	}
	w.mu.Lock()
	a := w.attempts[promptID]
	w.mu.Unlock()
	if a != nil {
		a.offerPreview(nodeID, contentType, img)
	}
}

func imageTypeName(t uint32) string {
	if t == 1 {
		return "image/jpeg"
	}
	return "image/png"
}
