// Package comfyconsole is the comfy_console handler: an operator's page in
// the browser (static files embedded in the binary, no build step) and
// the small JSON API it polls — every account's jobs with their progress
// and outputs, a job's nodes, error and run log, the pools and their
// workers, and the last hour's uploads and router calls from the same
// counters /metrics serves. The page is public (it holds no data); every
// API answer needs the console's own credential, which has no default.
package comfyconsole

import (
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/apikey"
	"github.com/comfygate/comfygate/internal/browsersafe"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

//go:embed static
var staticFiles embed.FS

// Handler serves the console. Mount it with its prefix stripped
// (handle_path /console/*): the page uses relative URLs.
type Handler struct {
	// Token is a static bearer token that opens the console. Accepts
	// {env.X}.
	Token string `json:"token,omitempty"`
	// APIKeyAccount opens the console to the API keys of this account
	// (create them with `comfygate api-key … --account <it>`).
	APIKeyAccount string `json:"api_key_account,omitempty"`

	app         *comfygate.App
	logger      *zap.Logger
	tokenDigest [sha256.Size]byte
	static      http.Handler
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_console",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app and resolves the token.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_console: %w", err)
	}
	h.app = app.(*comfygate.App)
	h.logger = ctx.Logger()
	h.Token = caddy.NewReplacer().ReplaceKnown(h.Token, "")
	h.tokenDigest = sha256.Sum256([]byte(h.Token))
	sub, err := fs.Sub(staticFiles, "static")
	if err != nil {
		return err
	}
	h.static = http.FileServerFS(sub)
	return nil
}

// Validate refuses a console without a credential: it is never open.
func (h *Handler) Validate() error {
	switch {
	case h.Token == "" && h.APIKeyAccount == "":
		return errors.New("comfy_console: needs a credential (token or api_key_account); it is never open")
	case h.Token != "" && h.APIKeyAccount != "":
		return errors.New("comfy_console: token and api_key_account are exclusive")
	case h.Token != "" && len(h.Token) < 16:
		return errors.New("comfy_console: the token must be at least 16 characters")
	}
	return nil
}

// ServeHTTP serves the page's files, or the API to a caller with the
// credential.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	// The console's page calls its own origin only; a page of another
	// origin may not write here (the console only reads, but the rule is
	// the gateway's, as comfy_auth applies it).
	if err := sameOriginOnly.Check(r); err != nil {
		return err
	}
	rest, isAPI := strings.CutPrefix(r.URL.Path, "/api/")
	if !isAPI {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return apierr.New(http.StatusMethodNotAllowed, "method_not_allowed", "the console's files are read with GET")
		}
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' blob:; style-src 'self'")
		h.static.ServeHTTP(w, r)
		return nil
	}
	if err := h.authorize(r); err != nil {
		return err
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	if r.Method != http.MethodGet {
		return apierr.New(http.StatusMethodNotAllowed, "method_not_allowed", "the console API is read with GET")
	}
	w.Header().Set("Cache-Control", "no-store")
	return h.serveAPI(w, r, strings.Split(rest, "/"))
}

// authorize checks the bearer credential.
func (h *Handler) authorize(r *http.Request) error {
	scheme, token, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	if !strings.EqualFold(scheme, "Bearer") || token == "" {
		return apierr.Unauthorized()
	}
	if h.Token != "" {
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], h.tokenDigest[:]) != 1 {
			h.logger.Debug("console token refused")
			return apierr.Unauthorized()
		}
		return nil
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	k, err := apikey.Verify(r.Context(), h.app.Store(), token)
	switch {
	case errors.Is(err, apikey.ErrInvalid):
		h.logger.Debug("console api key refused")
		return apierr.Unauthorized()
	case err != nil:
		return apierr.Upstream(err)
	case k.AccountID != h.APIKeyAccount:
		h.logger.Debug("console api key of another account refused")
		return apierr.New(http.StatusForbidden, "forbidden", "this key does not open the console")
	}
	return nil
}

// sameOriginOnly is the browser policy with no allowed origin. The
// console needs a credential for every answer with data, so it has no
// Host check: a rebound name gets no further than the credential.
var sameOriginOnly browsersafe.Policy

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
