// Package comfyauth is the comfy_auth handler: it authenticates the caller
// and puts a principal.Principal in the request context for the handlers
// after it. Failures are typed errors rendered by error_envelope as 401
// unauthorized; bad credentials are logged at debug only.
package comfyauth

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/apikey"
	"github.com/comfygate/comfygate/internal/browsersafe"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/internal/router/jwtauth"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Modes.
const (
	ModeNone        = "none"
	ModeStaticToken = "static_token"
	ModeAPIKeys     = "api_keys"
)

// Handler authenticates requests.
type Handler struct {
	// Mode is none (default: every request is the local account),
	// static_token (one bearer token for the local account) or api_keys
	// (account-scoped keys managed with `comfygate api-key`).
	Mode string `json:"mode,omitempty"`
	// Token is the static bearer token. Accepts {env.X}.
	Token string `json:"token,omitempty"`
	// Account is the account id used by none and static_token. Default "local".
	Account string `json:"account,omitempty"`
	// JWT configures jwt mode (the model router's bearer tokens).
	JWT *jwtauth.Config `json:"jwt,omitempty"`
	// QueryParam, when set, lets static_token and api_keys requests without
	// an Authorization header carry the token in this query parameter
	// (browsers cannot set headers on a WebSocket; ComfyUI clients put a
	// token in `token`). The parameter is removed from the request once
	// read; access logs record the URI as received, so filter it there
	// (see docs/security.md, "What is logged").
	QueryParam string `json:"query_param,omitempty"`
	// AllowOrigins are the origins (scheme://host[:port]) of the web pages
	// that may call this route across origins: their state-changing
	// requests are served, their CORS preflights answered. Every other
	// page's are refused 403 (see internal/browsersafe). Default: none.
	AllowOrigins []string `json:"allow_origins,omitempty"`
	// AllowHosts (mode none only) are the host names, beside IP addresses
	// and localhost, that a request may name in Host: a route without
	// authentication refuses every other name (DNS rebinding). Default:
	// none.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// MinBodyRate is the slowest a request body may arrive, in bytes per
	// second, once BodyGrace of slack is used up; a body that stalls for
	// longer than BodyGrace is cut too. The request is answered 408
	// request_timeout (see httpx.BodyRate: slow-POST and slowloris
	// bodies). Default 1024; negative turns the bound off.
	MinBodyRate int64 `json:"min_body_rate,omitempty"`
	// BodyGrace is the slack of MinBodyRate and the longest a body may
	// stall. Default 30s.
	BodyGrace caddy.Duration `json:"body_grace,omitempty"`

	app      *comfygate.App
	browsers *browsersafe.Policy
	// deploymentHost is browsers without the Host check, for a request
	// comfy_deployment resolved by its host name.
	deploymentHost *browsersafe.Policy
	bodyRate       httpx.BodyRate
	tokenDigest    [sha256.Size]byte
	verifier       *jwtauth.Verifier
	logger         *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_auth",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision resolves the token and reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Mode == "" {
		h.Mode = ModeNone
	}
	if h.Account == "" {
		h.Account = principal.LocalAccount
	}
	h.Token = caddy.NewReplacer().ReplaceKnown(h.Token, "")
	h.bodyRate = httpx.BodyRate{Rate: h.MinBodyRate, Grace: time.Duration(h.BodyGrace)}
	if h.bodyRate.Rate == 0 {
		h.bodyRate.Rate = httpx.DefaultMinBodyRate
	}
	if h.bodyRate.Grace <= 0 {
		h.bodyRate.Grace = httpx.DefaultBodyGrace
	}
	h.tokenDigest = sha256.Sum256([]byte(h.Token))
	browsers, err := browsersafe.New(browsersafe.Config{AllowOrigins: h.AllowOrigins,
		CheckHost: h.Mode == ModeNone, AllowHosts: h.AllowHosts})
	if err != nil {
		return fmt.Errorf("comfy_auth: %w", err)
	}
	h.browsers = browsers
	// A deployment's own host (<id>.<domain>) is a name comfy_deployment
	// was configured with: no Host check there.
	if h.deploymentHost, err = browsersafe.New(browsersafe.Config{AllowOrigins: h.AllowOrigins}); err != nil {
		return fmt.Errorf("comfy_auth: %w", err)
	}
	if h.Mode == ModeJWT {
		return h.provisionJWT()
	}
	if h.Mode == ModeAPIKeys {
		app, err := ctx.App("comfygate")
		if err != nil {
			return fmt.Errorf("comfy_auth: %w", err)
		}
		h.app = app.(*comfygate.App)
	}
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	switch h.Mode {
	case ModeNone, ModeAPIKeys, ModeJWT:
	case ModeStaticToken:
		if h.Token == "" {
			return errors.New("comfy_auth: static_token needs a token")
		}
	default:
		return fmt.Errorf("comfy_auth: unknown mode %q", h.Mode)
	}
	if h.QueryParam != "" && h.Mode != ModeStaticToken && h.Mode != ModeAPIKeys {
		return errors.New("comfy_auth: query_param applies to static_token and api_keys only")
	}
	if len(h.AllowHosts) > 0 && h.Mode != ModeNone {
		return errors.New("comfy_auth: allow_host applies to mode none only (the others authenticate every request)")
	}
	return nil
}

// ServeHTTP applies the browser policy (cross-origin writes, CORS, and
// without authentication the Host), authenticates and calls next with the
// principal set. Every handler that changes state needs comfy_auth before
// it (RequireBefore), so no route can serve a write without the policy. On a
// deployment that comfy_deployment resolved, it then admits the caller:
// the public demo takes anyone as its owner account without looking at
// credentials; any other deployment only its owner (see deployments.Scope).
// A request whose body came chunked closes its connection after the answer
// (httpx.CloseAfterChunked: request smuggling), and a body that arrives
// too slowly is cut (httpx.BodyRate).
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	httpx.CloseAfterChunked(w, r) // before anything can answer
	if !httpx.CanonicalPath(r.URL.Path) {
		// The handlers after this one act on the path Caddy's matchers
		// saw cleaned; another form could slip past an operator's rule.
		return apierr.NotFound("no such route")
	}
	scope, scoped := deployments.From(r.Context())
	browsers := h.browsers
	if scoped && scope.Mount == "" {
		browsers = h.deploymentHost
	}
	if handled, err := browsers.Serve(w, r); handled || err != nil {
		if err != nil {
			h.logger.Debug("browser request refused", zap.String("host", r.Host), zap.String("origin", r.Header.Get("Origin")),
				zap.String("sec_fetch_site", r.Header.Get("Sec-Fetch-Site")))
		}
		return err
	}
	var p principal.Principal
	var err error
	if scoped && scope.Public() {
		p = principal.Principal{AccountID: scope.Deployment.AccountID, WorkspaceID: scope.Deployment.AccountID}
	} else if p, err = h.authenticate(r); err != nil {
		return err
	}
	if scoped {
		if err := scope.Admit(p.AccountID); err != nil {
			return err
		}
	}
	defer h.bodyRate.Apply(w, r)()
	comfygate.SetPlaceholder(r, comfygate.PlaceholderAccount, p.AccountID)
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		repl.Set("http.auth.user.id", p.AccountID)
	}
	return next.ServeHTTP(w, r.WithContext(principal.With(r.Context(), p)))
}

func (h *Handler) authenticate(r *http.Request) (principal.Principal, error) {
	local := principal.Principal{AccountID: h.Account, WorkspaceID: h.Account}
	if h.Mode == ModeNone {
		return local, nil
	}
	if h.Mode == ModeJWT {
		return h.authenticateJWT(r)
	}
	token, ok := bearer(r)
	if !ok && h.QueryParam != "" && r.Header.Get("Authorization") == "" {
		token, ok = queryToken(r, h.QueryParam)
	}
	if !ok {
		return principal.Principal{}, unauthorized(r)
	}
	switch h.Mode {
	case ModeStaticToken:
		got := sha256.Sum256([]byte(token))
		if subtle.ConstantTimeCompare(got[:], h.tokenDigest[:]) != 1 {
			h.logger.Debug("static token refused")
			return principal.Principal{}, unauthorized(r)
		}
		return local, nil
	default: // ModeAPIKeys
		if err := h.app.Ready(); err != nil {
			return principal.Principal{}, apierr.Upstream(err)
		}
		k, err := apikey.Verify(r.Context(), h.app.Store(), token)
		if errors.Is(err, apikey.ErrInvalid) {
			h.logger.Debug("api key refused")
			return principal.Principal{}, unauthorized(r)
		}
		if err != nil {
			return principal.Principal{}, apierr.Upstream(err)
		}
		return principal.Principal{AccountID: k.AccountID, WorkspaceID: k.AccountID, KeyID: k.ID}, nil
	}
}

// bearer extracts an RFC 6750 bearer token.
func bearer(r *http.Request) (string, bool) {
	v := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// queryToken takes the token from the query parameter name and removes
// the parameter from r, so that nothing after this handler sees it.
func queryToken(r *http.Request, name string) (string, bool) {
	q := r.URL.Query()
	token := strings.TrimSpace(q.Get(name))
	if token == "" {
		return "", false
	}
	q.Del(name)
	r.URL.RawQuery = q.Encode()
	return token, true
}

func unauthorized(r *http.Request) error {
	e := apierr.Unauthorized()
	e.Header = http.Header{"Www-Authenticate": []string{`Bearer realm="comfygate"`}}
	return e
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
