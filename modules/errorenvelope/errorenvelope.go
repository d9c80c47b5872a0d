// Package errorenvelope is the error_envelope handler: it gives every
// response a request id and turns the errors returned by the handlers it
// wraps into the contract's error body — the v2 envelope
// {"error":{code,message,details}} or the router's {detail, error_type}.
//
// It must wrap the rest of the chain: typed errors (*apierr.Error) render as
// they are; Caddy's own HandlerErrors keep their status; anything else is a
// 500 upstream_error whose real cause is logged with the request id and never
// sent.
package errorenvelope

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/metrics"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Modes.
const (
	ModeV2     = "v2"
	ModeRouter = "router"
)

// Handler renders errors as the contract's bodies.
type Handler struct {
	// Mode is "v2" (default: the /api/v2 envelope and X-Request-Id) or
	// "router" (the model router body, X-Service-Request-Id and
	// X-Service-Error-Type, mirrored as X-Comfy-Request-Id and
	// X-Comfy-Error-Type).
	Mode string `json:"mode,omitempty"`

	logger *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.error_envelope",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision sets defaults.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Mode == "" {
		h.Mode = ModeV2
	}
	return nil
}

// Validate checks the mode.
func (h *Handler) Validate() error {
	if h.Mode != ModeV2 && h.Mode != ModeRouter {
		return errors.New("error_envelope: mode must be v2 or router")
	}
	return nil
}

// RequestIDHeader returns the header that carries the request id in mode
// (in router mode also mirrored, see routerMirror).
func RequestIDHeader(mode string) string {
	if mode == ModeRouter {
		return "X-Service-Request-Id"
	}
	return "X-Request-Id"
}

// Router mode answers with the contract's X-Service-* headers and mirrors
// each under the public Comfy router's X-Comfy-* name, which the official
// SDKs read (comfy.models.run takes its requestId and error code from
// them): one value, two names, so clients of either find it.
const (
	routerErrorTypeHeader = "X-Service-Error-Type"
	comfyRequestIDHeader  = "X-Comfy-Request-Id"
	comfyErrorTypeHeader  = "X-Comfy-Error-Type"
)

// SetRouterErrorType sets a router response's error bucket headers.
func SetRouterErrorType(h http.Header, bucket string) {
	h.Set(routerErrorTypeHeader, bucket)
	h.Set(comfyErrorTypeHeader, bucket)
}

// ServeHTTP sets the request id and renders any error from next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl, _ := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	reqID := ""
	if repl != nil {
		reqID = repl.ReplaceAll("{http.request.uuid}", "")
	}
	w.Header().Set(RequestIDHeader(h.Mode), reqID)
	if h.Mode == ModeRouter {
		w.Header().Set(comfyRequestIDHeader, reqID)
	}
	rec := &headerTracker{ResponseWriter: w}
	err := next.ServeHTTP(rec, r)
	if err == nil {
		return nil
	}
	e := Classify(err)
	h.log(r, reqID, e, err)
	if rec.wrote {
		// Too late to change the response; the log above is all we can do.
		return nil
	}
	h.write(w, e)
	return nil
}

// Classify turns any error into the *apierr.Error to render.
func Classify(err error) *apierr.Error {
	if e, ok := apierr.As(err); ok {
		return e
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apierr.PayloadTooLarge(mbe.Limit).WithCause(err)
	}
	if errors.Is(err, context.Canceled) {
		return apierr.New(499, "client_disconnected", "the client closed the request").WithCause(err)
	}
	var he caddyhttp.HandlerError
	if errors.As(err, &he) && he.StatusCode > 0 && he.StatusCode < 500 {
		return fromStatus(he.StatusCode).WithCause(err)
	}
	return apierr.Upstream(err)
}

// fromStatus names the contract code for a bare status from Caddy itself.
func fromStatus(status int) *apierr.Error {
	switch status {
	case http.StatusBadRequest:
		return apierr.InvalidRequest("the request is malformed")
	case http.StatusUnauthorized:
		return apierr.Unauthorized()
	case http.StatusForbidden:
		return apierr.Forbidden()
	case http.StatusNotFound:
		return apierr.NotFound("not found")
	case http.StatusMethodNotAllowed:
		return apierr.New(status, "method_not_allowed", "method not allowed")
	case http.StatusRequestEntityTooLarge:
		return apierr.New(status, "payload_too_large", "the request body is too large")
	case http.StatusTooManyRequests:
		return apierr.New(status, "rate_limited", "too many requests").WithRetryAfter(1)
	default:
		return apierr.New(status, "invalid_request", http.StatusText(status))
	}
}

func (h *Handler) write(w http.ResponseWriter, e *apierr.Error) {
	metrics.ErrorResponses.WithLabelValues(e.Code).Inc()
	hdr := w.Header()
	e.SetHeaders(hdr)
	hdr.Set("Content-Type", "application/json")
	hdr.Set("Cache-Control", "no-store")
	hdr.Del("Content-Length")
	var body any
	if h.Mode == ModeRouter {
		SetRouterErrorType(hdr, e.Code)
		body = routerBody(e)
	} else {
		body = v2Body(e)
	}
	w.WriteHeader(e.Status)
	_ = json.NewEncoder(w).Encode(body)
}

type v2Error struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

func v2Body(e *apierr.Error) any {
	return map[string]v2Error{"error": {Code: e.Code, Message: e.Message, Details: e.Details}}
}

// routerBody is {detail, error_type}; a model validation 422 carries the
// FastAPI-style list in Details["detail"] and no error_type.
func routerBody(e *apierr.Error) any {
	if list, ok := e.Details["detail"]; ok && e.Status == http.StatusUnprocessableEntity {
		return map[string]any{"detail": list}
	}
	body := map[string]any{"detail": e.Message, "error_type": e.Code}
	for k, v := range e.Details {
		if k != "detail" && k != "error_type" {
			body[k] = v
		}
	}
	return body
}

func (h *Handler) log(r *http.Request, reqID string, e *apierr.Error, err error) {
	level := zapcore.DebugLevel
	if e.Status >= 500 {
		level = zapcore.ErrorLevel
	}
	if ce := h.logger.Check(level, "request failed"); ce != nil {
		ce.Write(
			zap.String("request_id", reqID),
			zap.String("method", r.Method),
			zap.String("path", requestPath(r)),
			zap.Int("status", e.Status),
			zap.String("code", e.Code),
			zap.Error(err),
		)
	}
}

// requestPath is the path the request named, without its query: a query
// may carry a credential (comfy_auth's query_param, a presigned
// signature), and a failed request's log line must not repeat it.
func requestPath(r *http.Request) string {
	path, _, _ := strings.Cut(r.RequestURI, "?")
	return path
}

// headerTracker records whether the response has started.
type headerTracker struct {
	http.ResponseWriter
	wrote bool
}

func (t *headerTracker) WriteHeader(code int) {
	if code >= 200 {
		t.wrote = true
	}
	t.ResponseWriter.WriteHeader(code)
}

func (t *headerTracker) Write(p []byte) (int, error) {
	t.wrote = true
	return t.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the underlying writer (flush,
// deadlines) through this wrapper.
func (t *headerTracker) Unwrap() http.ResponseWriter { return t.ResponseWriter }

// ReadFrom keeps the underlying writer's sendfile fast path for downloads.
func (t *headerTracker) ReadFrom(src io.Reader) (int64, error) {
	t.wrote = true
	if rf, ok := t.ResponseWriter.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(t.ResponseWriter, src)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
