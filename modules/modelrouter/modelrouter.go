// Package modelrouter is the model_router handler: the /v1/models catalog,
// model detail, per-model input schema document and synchronous model call.
// It sits behind error_envelope (router mode) and comfy_auth (jwt mode); it
// reads the principal, answers catalog routes itself and hands calls to the
// calls domain package. Its own refusals are *apierr.Error values carrying
// the router bucket as Code, rendered by error_envelope.
package modelrouter

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/router/calls"
	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/internal/router/provider"
	"github.com/comfygate/comfygate/internal/router/rehost"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// DefaultMaxBodyBytes bounds a call body.
const DefaultMaxBodyBytes = 10 << 20

// DefaultRedisPrefix starts every limiter key.
const DefaultRedisPrefix = "comfygate:router:"

// Handler serves /v1/models… (and the same routes under /v2/models).
type Handler struct {
	// Catalog is the catalog file (JSON). It is read when the config loads,
	// so a config reload picks up a changed catalog. Accepts {env.X}.
	Catalog string `json:"catalog"`
	// PublicBase is the https:// base of input_schema_url (for example
	// https://router.example.com). Empty: https:// plus the request's host.
	PublicBase string `json:"public_base,omitempty"`
	// CursorKey signs catalog cursors (accepts {env.X}); set it when several
	// gateways serve one catalog. Empty: a random key per process.
	CursorKey string `json:"cursor_key,omitempty"`
	// AllowInsecureUpstreams permits http:// upstreams and private or
	// loopback partner addresses. Test switch only.
	AllowInsecureUpstreams bool `json:"allow_insecure_upstreams,omitempty"`
	// MaxInFlight, SpendCeilingCents, Rate and RequireCredits are every
	// workspace's limits (0 = unlimited). RequireCredits makes every call
	// reserve its price (catalog cents, one credit each) from the credit
	// ledger of the account whose id is the call's workspace (the JWT's
	// workspace claim) and settle what the partner billed: the same ledger
	// priced jobs draw from (`comfygate credits`).
	MaxInFlight       int          `json:"max_in_flight,omitempty"`
	SpendCeilingCents int64        `json:"spend_ceiling_cents,omitempty"`
	Rate              []RateWindow `json:"rate,omitempty"`
	RequireCredits    bool         `json:"require_credits,omitempty"`
	// LeaseTTL is the limiter lease TTL (default 30s; heartbeats every TTL/3).
	LeaseTTL caddy.Duration `json:"lease_ttl,omitempty"`
	// RedisPrefix prefixes limiter keys when the app has Redis.
	RedisPrefix string `json:"redis_prefix,omitempty"`
	// CollectWindow is how long a generation that outlived its deadline is
	// still followed for collection (default 30m).
	CollectWindow caddy.Duration `json:"collect_window,omitempty"`
	// TakeoverAfter is how long a call record may go untouched before a
	// same-key retry treats its gateway as dead and takes the generation
	// over (default 30s; owners touch every third of it).
	TakeoverAfter caddy.Duration `json:"takeover_after,omitempty"`
	// MaxBodyBytes bounds a call body (default 10 MiB).
	MaxBodyBytes int64 `json:"max_body_bytes,omitempty"`
	// Rehost is, per provider (the first segment of a model id), which
	// members of a successful answer hold result URLs and base64 payloads
	// to copy into the gateway's storage as assets of the caller's account,
	// and how long the copies live. A catalog entry's own "rehost" wins.
	Rehost map[string]rehost.RuleSpec `json:"rehost,omitempty"`
	// RehostMaxBytes bounds one copied result (default 64 MiB).
	RehostMaxBytes int64 `json:"rehost_max_bytes,omitempty"`
	// RehostTimeout bounds the copy of one result (default 1m).
	RehostTimeout caddy.Duration `json:"rehost_timeout,omitempty"`
	// RehostAllowPrivate lets result URLs reach loopback, private and
	// link-local addresses (refused by default, at dial time).
	RehostAllowPrivate bool `json:"rehost_allow_private,omitempty"`
	// RehostBase is the base URL the asset API is served under, for the
	// content URLs of copies (for example https://api.example.com/api/v2;
	// accepts {env.X}). Empty: the call's own origin + /api/v2.
	RehostBase string `json:"rehost_base,omitempty"`

	cat      *catalog.Catalog
	app      *comfygate.App
	limiter  limits.Limiter
	poolKey  string
	service  *calls.Service
	logger   *zap.Logger
	baseURL  *url.URL
	limitSet limits.Limits
	// rehostBase is RehostBase resolved, "" for the call's origin.
	rehostBase string
}

// RateWindow is a windowed allowance: at most Max calls per Period.
type RateWindow struct {
	Name   string         `json:"name"`
	Period caddy.Duration `json:"period"`
	Max    int            `json:"max"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.model_router",
		New: func() caddy.Module { return new(Handler) },
	}
}

// processCursorKey signs cursors when no key is configured: stable across
// reloads within one process (the catalog version in the cursor still
// refuses cursors from an older catalog).
var processCursorKey = func() []byte {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return b
}()

// Provision loads the catalog and takes a limiter reference. It opens no
// connection: the Redis limiter dials on first use.
func (h *Handler) Provision(ctx caddy.Context) error {
	// It reads the principal: refuse a config with no comfy_auth before it.
	if err := comfyauth.RequireBefore(ctx, "model_router"); err != nil {
		return err
	}
	h.logger = ctx.Logger()
	repl := caddy.NewReplacer()
	if h.Catalog == "" {
		return errors.New("model_router: catalog file is required")
	}
	path := repl.ReplaceKnown(h.Catalog, "")
	key := []byte(repl.ReplaceKnown(h.CursorKey, ""))
	if len(key) == 0 {
		key = processCursorKey
	}
	resolve := func(s string) string { return repl.ReplaceKnown(s, "") }
	rules := map[string]*rehost.Rule{}
	for provider, spec := range h.Rehost {
		r, err := spec.Compile()
		if err != nil {
			return fmt.Errorf("model_router: rehost %s: %w", provider, err)
		}
		rules[provider] = r
	}
	cat, err := catalog.LoadFile(path, resolve, catalog.Options{CursorKey: key, AllowHTTPUpstream: h.AllowInsecureUpstreams,
		Rehost: rules})
	if err != nil {
		return fmt.Errorf("model_router: %w", err)
	}
	h.cat = cat
	if h.PublicBase != "" {
		u, err := url.Parse(strings.TrimRight(repl.ReplaceKnown(h.PublicBase, ""), "/"))
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("model_router: public_base %q must be an absolute https:// URL", h.PublicBase)
		}
		h.baseURL = u
	}
	if h.MaxBodyBytes <= 0 {
		h.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if h.RedisPrefix == "" {
		h.RedisPrefix = DefaultRedisPrefix
	}
	// Credits live in the app's ledger, not in the limiter: the limiter
	// checks in-flight calls, spend and rates; the calls service reserves
	// and settles credits in the ledger (calls.Credits).
	h.limitSet = limits.Limits{MaxInFlight: h.MaxInFlight, SpendCeilingCents: h.SpendCeilingCents}
	for _, w := range h.Rate {
		h.limitSet.Rate = append(h.limitSet.Rate, limits.Window{Name: w.Name, Period: time.Duration(w.Period), Max: w.Max})
	}
	appVal, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("model_router: %w", err)
	}
	h.app = appVal.(*comfygate.App)
	h.limiter, h.poolKey, err = loadLimiter(h.app.RedisURL(), h.RedisPrefix, time.Duration(h.LeaseTTL))
	if err != nil {
		return fmt.Errorf("model_router: %w", err)
	}
	client := provider.NewClient(provider.Options{AllowInsecure: h.AllowInsecureUpstreams,
		ResponseHeaderTimeout: headerTimeout(cat)})
	var credits calls.Credits
	if h.RequireCredits {
		credits = appCredits{h.app}
	}
	if h.RehostBase != "" {
		h.rehostBase = strings.TrimRight(repl.ReplaceKnown(h.RehostBase, ""), "/")
		if u, err := url.Parse(h.rehostBase); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return fmt.Errorf("model_router: rehost_base %q must be an absolute http(s) URL", h.RehostBase)
		}
	}
	var copier *rehost.Copier
	if hasRehost(cat) {
		copier = rehost.New(rehost.Config{Assets: appAssets{h.app}, MaxBytes: h.RehostMaxBytes,
			Timeout: time.Duration(h.RehostTimeout), AllowPrivate: h.RehostAllowPrivate, Logger: h.logger})
	}
	h.service = calls.New(calls.Config{
		Limiter: h.limiter, Limits: h.limitSet, Credits: credits, Store: appRouterStore{h.app},
		Adapters: provider.Adapters(client), CollectWindow: time.Duration(h.CollectWindow),
		TakeoverAfter: time.Duration(h.TakeoverAfter), Logger: h.logger, Rehost: copier,
	})
	h.logger.Debug("model router provisioned", zap.Int("models", cat.Len()), zap.String("catalog_version", cat.Version()))
	return nil
}

// headerTimeout is the outbound transport's response-header bound: the
// provider default, raised above the catalog's longest deadline so that a
// slow synchronous model is cut by its own deadline, not by the transport.
func headerTimeout(cat *catalog.Catalog) time.Duration {
	d := provider.DefaultResponseHeaderTimeout
	for _, m := range cat.Models() {
		d = max(d, m.Deadline+time.Minute)
	}
	return d
}

// hasRehost reports whether any model copies its results.
func hasRehost(cat *catalog.Catalog) bool {
	for _, m := range cat.Models() {
		if m.Rehost != nil {
			return true
		}
	}
	return false
}

// Validate checks the limits.
func (h *Handler) Validate() error {
	if h.RehostMaxBytes < 0 || h.RehostTimeout < 0 {
		return errors.New("model_router: rehost_max_size and rehost_timeout must not be negative")
	}
	if h.MaxInFlight < 0 || h.SpendCeilingCents < 0 {
		return errors.New("model_router: limits must not be negative")
	}
	for _, w := range h.Rate {
		if w.Name == "" || w.Period <= 0 || w.Max < 1 {
			return fmt.Errorf("model_router: rate window %q needs a name, a positive period and max >= 1", w.Name)
		}
	}
	return nil
}

// Cleanup flushes usage records and drops this config's limiter reference.
func (h *Handler) Cleanup() error {
	if h.service != nil {
		h.service.Close() // flush queued usage records
	}
	if h.poolKey != "" {
		_, err := limiterPool.Delete(h.poolKey)
		return err
	}
	return nil
}

// routePrefixes are the paths the router answers under: the contract's
// /v1/models, and /v2/models, where the public Comfy router serves the same
// routes and the official SDKs call them (comfy.models.run).
var routePrefixes = [...]string{"/v1/models", "/v2/models"}

// cutRoutePrefix splits a router path into its prefix and the rest.
func cutRoutePrefix(path string) (prefix, rest string, ok bool) {
	for _, p := range routePrefixes {
		if rest, ok := strings.CutPrefix(path, p); ok && (rest == "" || rest[0] == '/') {
			return p, rest, true
		}
	}
	return "", "", false
}

// ServeHTTP routes /v1/models… and /v2/models….
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	_, rest, ok := cutRoutePrefix(r.URL.Path)
	if !ok {
		return modelNotFound(nil)
	}
	if rest == "" || rest == "/" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed("GET")
		}
		return h.serveList(w, r)
	}
	id := strings.Trim(rest, "/")
	if schemaID, isSchema := strings.CutSuffix(id, "/openapi.json"); isSchema {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return methodNotAllowed("GET")
		}
		return h.serveSchema(w, r, schemaID)
	}
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return h.serveDetail(w, r, id)
	case http.MethodPost:
		return h.serveCall(w, r, id)
	}
	return methodNotAllowed("GET, POST")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
