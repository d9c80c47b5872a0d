// Package idempotency is the idempotency handler: for the v2 routes it wraps
// it makes Idempotency-Key single-use per account (see package idem). It only
// prepares the claim; the handler that creates something takes it at the
// moment of submission, and this handler releases it afterwards when the
// submission definitively failed.
package idempotency

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/idem"
	"github.com/comfygate/comfygate/internal/metrics"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler attaches an idempotency claim to requests that carry a key.
type Handler struct {
	// TTL is how long a claimed key stays claimed. Default 24h (the contract's).
	TTL caddy.Duration `json:"ttl,omitempty"`

	app *comfygate.App
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.idempotency",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	// It reads the principal: refuse a config with no comfy_auth before it.
	if err := comfyauth.RequireBefore(ctx, "idempotency"); err != nil {
		return err
	}
	if h.TTL == 0 {
		h.TTL = caddy.Duration(idem.DefaultTTL)
	}
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("idempotency: %w", err)
	}
	h.app = app.(*comfygate.App)
	return nil
}

// ServeHTTP attaches the claim, runs next and settles the claim.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	key, present := r.Header["Idempotency-Key"]
	if !present || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return next.ServeHTTP(w, r)
	}
	if len(key) != 1 {
		return apierr.InvalidRequest("send one Idempotency-Key header")
	}
	if err := idem.CheckKey(key[0]); err != nil {
		return err
	}
	p, ok := principal.From(r.Context())
	if !ok {
		return apierr.Upstream(fmt.Errorf("idempotency: no principal; put comfy_auth before idempotency"))
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	claim := idem.New(h.app.Claims(), p.AccountID, key[0], time.Duration(h.TTL))
	err := next.ServeHTTP(w, r.WithContext(idem.WithClaim(r.Context(), claim)))
	err = claim.Refuse(r.Context(), err)
	claim.Settle(r.Context(), err)
	if e, ok := apierr.As(err); ok && e.Code == apierr.IdempotencyKeyReuse().Code {
		metrics.IdempotencyKeyReuses.WithLabelValues(routeOf(r)).Inc()
	}
	return err
}

// routeOf names the v2 collection a request went to (assets, jobs), the
// label of the key-reuse count.
func routeOf(r *http.Request) string {
	_, rest, _ := httpx.Route(r.URL.Path)
	collection, _, _ := strings.Cut(rest, "/")
	switch collection {
	case "assets", "jobs":
		return collection
	}
	return "other"
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
