// Package comfynative is the comfy_native handler: ComfyUI's own HTTP and
// WebSocket API (/prompt, /queue, /history, /view, /upload/image, /ws, …)
// over comfygate's jobs and assets, so that existing ComfyUI clients run
// unmodified against the gateway. It parses requests and writes answers;
// the translation lives in internal/nativeapi. Put it behind comfy_auth,
// which also refuses what a web page of another origin sends it (ComfyUI's
// own guard, there for every route of the gateway: internal/browsersafe).
package comfynative

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/nativeapi"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler serves ComfyUI's API.
type Handler struct {
	// Pool is the worker pool prompts run on and whose node catalog
	// /object_info lists. Default: the comfygate app's default pool.
	Pool string `json:"pool,omitempty"`

	app     *comfygate.App
	logger  *zap.Logger
	sockets *sockets
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_native",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	// It reads the principal: refuse a config with no comfy_auth before it.
	if err := comfyauth.RequireBefore(ctx, "comfy_native"); err != nil {
		return err
	}
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_native: %w", err)
	}
	h.app = app.(*comfygate.App)
	h.logger = ctx.Logger()
	if h.Pool == "" {
		h.Pool = h.app.DefaultPool()
	}
	if !h.app.HasPool(h.Pool) {
		return fmt.Errorf("comfy_native: no pool named %q in the comfygate app", h.Pool)
	}
	h.sockets = newSockets(h.app.Streams())
	// Sockets end when this configuration stops, as its requests would.
	go func() {
		select {
		case <-h.app.Stopping():
			h.sockets.stop()
		case <-h.sockets.ctx.Done():
		}
	}()
	return nil
}

// Cleanup ends this handler's sockets.
func (h *Handler) Cleanup() error {
	if h.sockets != nil {
		h.sockets.stop()
	}
	return nil
}

// route is a ComfyUI route: its path below the mount (without the /api
// alias) and method.
type route struct {
	method, path string
}

// ServeHTTP serves ComfyUI's routes; every other path passes to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	p := r.URL.Path
	if rest, ok := strings.CutPrefix(p, "/api/"); ok && !strings.HasPrefix(rest, "v2/") {
		p = "/" + rest // ComfyUI serves every route under /api too
	}
	first, rest, _ := strings.Cut(strings.TrimPrefix(p, "/"), "/")
	if !known(first, rest) {
		return next.ServeHTTP(w, r)
	}
	pr, ok := principal.From(r.Context())
	if !ok {
		return apierr.Upstream(errors.New("comfy_native: no principal; put comfy_auth before comfy_native"))
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	svc := h.service()
	account := pr.AccountID
	switch rt := (route{r.Method, first}); {
	case first == "ws":
		return h.serveSocket(w, r, svc, account)
	case rt == (route{http.MethodGet, "prompt"}):
		n, err := svc.QueueRemaining(r.Context(), account)
		if err != nil {
			return err
		}
		return writeJSON(w, map[string]any{"exec_info": map[string]any{"queue_remaining": n}})
	case rt == (route{http.MethodPost, "prompt"}):
		return h.postPrompt(w, r, svc, account)
	case rt == (route{http.MethodGet, "queue"}):
		running, pending, err := svc.Queue(r.Context(), account)
		if err != nil {
			return err
		}
		return writeJSON(w, map[string]any{"queue_running": running, "queue_pending": pending})
	case rt == (route{http.MethodPost, "queue"}):
		return postList(w, r, func(ctx context.Context) error { return svc.ClearQueue(ctx, account) },
			func(ctx context.Context, ids []string) error { return svc.DeleteQueued(ctx, account, ids) })
	case rt == (route{http.MethodPost, "interrupt"}):
		var body struct {
			PromptID string `json:"prompt_id"`
		}
		_ = readOptionalJSON(r, &body) // no or another body: every running prompt, as ComfyUI
		if body.PromptID != "" {
			comfygate.SetPlaceholder(r, comfygate.PlaceholderJobID, body.PromptID)
		}
		if err := svc.Interrupt(r.Context(), account, body.PromptID); err != nil {
			return err
		}
		w.WriteHeader(http.StatusOK)
		return nil
	case rt == (route{http.MethodGet, "history"}):
		return h.getHistory(w, r, svc, account, rest)
	case rt == (route{http.MethodPost, "history"}) && rest == "":
		return postList(w, r, func(ctx context.Context) error { return svc.ClearHistory(ctx, account) },
			func(ctx context.Context, ids []string) error { return svc.HideHistory(ctx, account, ids) })
	case first == "view" && (r.Method == http.MethodGet || r.Method == http.MethodHead):
		return h.view(w, r, svc, account)
	case rt == (route{http.MethodPost, "upload"}) && (rest == "image" || rest == "mask"):
		return h.upload(w, r, svc, account, rest == "mask")
	case rt == (route{http.MethodGet, "object_info"}):
		return h.objectInfo(w, r, rest)
	case r.Method == http.MethodGet:
		return h.introspect(w, first, rest)
	}
	return apierr.New(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed")
}

// known reports whether first/rest is a route this handler answers.
func known(first, rest string) bool {
	switch first {
	case "prompt", "queue", "interrupt", "view", "ws", "system_stats", "features", "embeddings", "extensions":
		return rest == ""
	case "history", "object_info", "models":
		return !strings.Contains(rest, "/")
	case "upload":
		return rest == "image" || rest == "mask"
	}
	return false
}

// service binds the domain service to this handler's pool.
func (h *Handler) service() *nativeapi.Service {
	return &nativeapi.Service{
		Jobs:   h.app.Jobs(h.Pool),
		Assets: h.app.Assets(),
		Native: h.app.Store(),
		ObjectInfo: func(ctx context.Context) (map[string]json.RawMessage, error) {
			return h.app.ObjectInfo(ctx, h.Pool)
		},
		Logger: h.logger,
	}
}

func (h *Handler) postPrompt(w http.ResponseWriter, r *http.Request, svc *nativeapi.Service, account string) error {
	limit := workflow.DefaultLimits().MaxBodyBytes
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return writeRejection(w, &nativeapi.Rejection{Status: http.StatusRequestEntityTooLarge,
				Body: nativeapi.RejectionBody{Error: nativeapi.ErrorInfo{Type: "payload_too_large",
					Message: fmt.Sprintf("the request body exceeds the limit of %d bytes", limit), ExtraInfo: map[string]any{}},
					NodeErrors: map[string]any{}}})
		}
		return httpx.ReadFailure(err, limit)
	}
	if len(body) == 0 {
		return writeRejection(w, nativeapi.InvalidPrompt("invalid_prompt", "the body must be a JSON object", ""))
	}
	queued, err := svc.QueuePrompt(r.Context(), account, body)
	var rej *nativeapi.Rejection
	if errors.As(err, &rej) {
		h.logger.Debug("prompt refused", zap.String("type", rej.Body.Error.Type), zap.String("account", account))
		return writeRejection(w, rej)
	}
	if err != nil {
		return err
	}
	comfygate.SetPlaceholder(r, comfygate.PlaceholderJobID, queued.PromptID)
	err = writeJSON(w, queued)
	_ = http.NewResponseController(w).Flush()
	queued.Announce(context.WithoutCancel(r.Context()))
	return err
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
