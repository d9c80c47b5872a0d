// Package comfyhealth is the comfy_health handler: /healthz answers while
// the process serves, /readyz whether every backend (storage, Redis, the
// blob store) answers now, with each one's status in the body and 503
// when one does not. Other paths go to the next handler.
package comfyhealth

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Defaults.
const (
	defaultLivePath  = "/healthz"
	defaultReadyPath = "/readyz"
	defaultTimeout   = 2 * time.Second
)

// Handler serves the health endpoints.
type Handler struct {
	// LivePath answers 200 while the process serves. Default /healthz.
	LivePath string `json:"live_path,omitempty"`
	// ReadyPath answers 200 when every backend answers, else 503. Default
	// /readyz.
	ReadyPath string `json:"ready_path,omitempty"`
	// Timeout bounds the backends' answers to one readiness check.
	// Default 2s.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	app *comfygate.App
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_health",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app and fills in defaults.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_health: %w", err)
	}
	h.app = app.(*comfygate.App)
	if h.LivePath == "" {
		h.LivePath = defaultLivePath
	}
	if h.ReadyPath == "" {
		h.ReadyPath = defaultReadyPath
	}
	if h.Timeout <= 0 {
		h.Timeout = caddy.Duration(defaultTimeout)
	}
	return nil
}

// readiness is /readyz's body.
type readiness struct {
	Status string                       `json:"status"`
	Checks []comfygate.DependencyStatus `json:"checks"`
}

// ServeHTTP answers the two paths and passes anything else on.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	if r.URL.Path != h.LivePath && r.URL.Path != h.ReadyPath {
		return next.ServeHTTP(w, r)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead)
	}
	w.Header().Set("Cache-Control", "no-store")
	if r.URL.Path == h.LivePath {
		return httpx.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	}
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(h.Timeout))
	defer cancel()
	body := readiness{Status: "ready", Checks: h.app.Readiness(ctx)}
	status := http.StatusOK
	for _, c := range body.Checks {
		if !c.OK {
			body.Status, status = "unready", http.StatusServiceUnavailable
		}
	}
	return httpx.WriteJSON(w, status, body)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
