package comfynative

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/coder/websocket"
	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/nativeapi"
	"github.com/comfygate/comfygate/internal/streamlimit"
)

// maxClientIDBytes bounds a clientId.
const maxClientIDBytes = 256

// sockets are this handler's open /ws sessions: one per client id (a
// reconnect with the same id replaces the old socket, as in ComfyUI), all
// ended when the configuration stops. Each holds one of its account's
// connections of the app's stream limiter (max_streams, shared with the
// v2 API's event streams).
type sockets struct {
	ctx    context.Context
	cancel context.CancelFunc
	limit  *streamlimit.Limiter

	mu       sync.Mutex
	sessions map[string]*session // per account + client id
	wg       sync.WaitGroup
}

func newSockets(limit *streamlimit.Limiter) *sockets {
	ctx, cancel := context.WithCancel(context.Background())
	return &sockets{ctx: ctx, cancel: cancel, limit: limit, sessions: map[string]*session{}}
}

func (s *sockets) stop() {
	s.cancel()
	s.wg.Wait()
}

// session is one admitted socket.
type session struct{ cancel context.CancelFunc }

// admit registers a session, replacing an older one of the same client id
// (admitted even at the bound: the older one's slot frees as it ends).
func (s *sockets) admit(account, clientID string) (ctx context.Context, release func(), ok bool) {
	key := account + "\x00" + clientID
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return nil, nil, false
	}
	var slot func()
	if old := s.sessions[key]; old != nil {
		old.cancel() // its release runs when it ends
		slot = s.limit.Replace(account)
	} else if slot, ok = s.limit.Acquire(account, 0); !ok {
		return nil, nil, false
	}
	ctx, cancel := context.WithCancel(s.ctx)
	me := &session{cancel: cancel}
	s.sessions[key] = me
	s.wg.Add(1)
	return ctx, func() {
		cancel()
		slot()
		s.mu.Lock()
		if s.sessions[key] == me { // a replacement may own the key by now
			delete(s.sessions, key)
		}
		s.mu.Unlock()
		s.wg.Done()
	}, true
}

// newSessionID is the id ComfyUI gives a socket that names none.
func newSessionID() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// wsSocket adapts a websocket.Conn to nativeapi.Socket.
type wsSocket struct{ c *websocket.Conn }

func (s wsSocket) Read(ctx context.Context) ([]byte, error) {
	_, b, err := s.c.Read(ctx)
	return b, err
}

func (s wsSocket) Write(ctx context.Context, f nativeapi.Frame) error {
	if f.Binary != nil {
		return s.c.Write(ctx, websocket.MessageBinary, f.Binary)
	}
	return s.c.Write(ctx, websocket.MessageText, f.Text)
}

// serveSocket upgrades GET /ws?clientId= and runs its session.
func (h *Handler) serveSocket(w http.ResponseWriter, r *http.Request, svc *nativeapi.Service, account string) error {
	if r.Method != http.MethodGet {
		return apierr.New(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
	}
	clientID := r.URL.Query().Get("clientId")
	if len(clientID) > maxClientIDBytes {
		return apierr.InvalidRequest("clientId is too long")
	}
	if clientID == "" {
		clientID = newSessionID()
	}
	ctx, release, ok := h.sockets.admit(account, clientID)
	if !ok {
		return apierr.New(http.StatusTooManyRequests, "too_many_streams",
			"too many open sockets and event streams; close one").WithRetryAfter(5)
	}
	defer release()
	// comfy_auth, which put the principal in r, has applied the gateway's
	// browser policy to this handshake (a foreign page's is refused, an
	// allowed origin's is not): the library's own same-host check would
	// refuse the allowed origins too.
	conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		h.logger.Debug("websocket upgrade refused", zap.Error(err))
		return nil // Accept has answered
	}
	defer conn.CloseNow()
	conn.SetReadLimit(64 << 10)
	sess := &nativeapi.Session{Svc: svc, Account: account, ClientID: clientID,
		Socket: wsSocket{conn}, MaxUploadBytes: h.app.MaxUploadBytes}
	err = sess.Run(ctx)
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		conn.Close(websocket.StatusGoingAway, "")
	case websocket.CloseStatus(err) != -1:
	default:
		h.logger.Debug("websocket session ended", zap.Error(err))
	}
	return nil
}
