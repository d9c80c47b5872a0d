package errorenvelope

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/comfygate/comfygate/internal/apierr"
)

const secretCause = "dial tcp 10.0.0.7:5432: password authentication failed for user comfy"

func TestClassify(t *testing.T) {
	typed := apierr.InvalidWorkflow("bad graph")
	tests := []struct {
		name       string
		err        error
		status     int
		code       string
		same       *apierr.Error // when set, Classify must return this value
		retryAfter int
	}{
		{"apierr", typed, 422, "invalid_workflow", typed, 0},
		{"wrapped apierr", fmt.Errorf("submit: %w", typed), 422, "invalid_workflow", typed, 0},
		{"apierr inside HandlerError", caddyhttp.Error(http.StatusBadRequest, typed), 422, "invalid_workflow", typed, 0},
		{"max bytes", &http.MaxBytesError{Limit: 1024}, 413, "payload_too_large", nil, 0},
		{"wrapped max bytes", fmt.Errorf("reading: %w", &http.MaxBytesError{Limit: 7}), 413, "payload_too_large", nil, 0},
		{"canceled", context.Canceled, 499, "client_disconnected", nil, 0},
		{"wrapped canceled", fmt.Errorf("copy: %w", context.Canceled), 499, "client_disconnected", nil, 0},
		{"deadline", context.DeadlineExceeded, 500, "upstream_error", nil, 0},
		{"handler 400", caddyhttp.Error(400, errors.New("x")), 400, "invalid_request", nil, 0},
		{"handler 401", caddyhttp.Error(401, errors.New("x")), 401, "unauthorized", nil, 0},
		{"handler 403", caddyhttp.Error(403, errors.New("x")), 403, "forbidden", nil, 0},
		{"handler 404", caddyhttp.Error(404, errors.New("x")), 404, "not_found", nil, 0},
		{"handler 405", caddyhttp.Error(405, errors.New("x")), 405, "method_not_allowed", nil, 0},
		{"handler 413", caddyhttp.Error(413, errors.New("x")), 413, "payload_too_large", nil, 0},
		{"handler 429", caddyhttp.Error(429, errors.New("x")), 429, "rate_limited", nil, 1},
		{"handler 418 other 4xx", caddyhttp.Error(418, errors.New("x")), 418, "invalid_request", nil, 0},
		{"handler 502", caddyhttp.Error(502, errors.New(secretCause)), 500, "upstream_error", nil, 0},
		{"handler 503", caddyhttp.Error(503, errors.New(secretCause)), 500, "upstream_error", nil, 0},
		{"handler zero status", caddyhttp.HandlerError{Err: errors.New(secretCause)}, 500, "upstream_error", nil, 0},
		{"wrapped handler 404", fmt.Errorf("route: %w", caddyhttp.Error(404, errors.New("x"))), 404, "not_found", nil, 0},
		{"untyped", errors.New(secretCause), 500, "upstream_error", nil, 0},
		{"wrapped untyped", fmt.Errorf("query: %w", errors.New(secretCause)), 500, "upstream_error", nil, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := Classify(tt.err)
			if e == nil {
				t.Fatal("Classify returned nil")
			}
			if e.Status != tt.status || e.Code != tt.code {
				t.Fatalf("Classify(%v) = %d %s, want %d %s", tt.err, e.Status, e.Code, tt.status, tt.code)
			}
			if tt.same != nil && e != tt.same {
				t.Fatalf("Classify did not return the typed error itself")
			}
			if e.RetryAfter != tt.retryAfter {
				t.Fatalf("RetryAfter = %d, want %d", e.RetryAfter, tt.retryAfter)
			}
			if e.Message == "" {
				t.Fatal("empty message")
			}
			if strings.Contains(e.Message, "10.0.0.7") || strings.Contains(e.Message, "password") {
				t.Fatalf("message leaks the cause: %q", e.Message)
			}
			if tt.same == nil && !errors.Is(e, tt.err) && !errors.Is(e.Cause, tt.err) {
				t.Fatalf("the cause is not kept for the log: %v", e.Cause)
			}
		})
	}
}

func TestClassifyMaxBytesLimitInMessage(t *testing.T) {
	e := Classify(&http.MaxBytesError{Limit: 4096})
	if !strings.Contains(e.Message, "4096") {
		t.Fatalf("message %q does not name the limit", e.Message)
	}
}

// newRequest returns a request whose context holds a Caddy replacer with
// the given request uuid, as Caddy's server sets it up.
func newRequest(method, target, uuid string) *http.Request {
	req := httptest.NewRequest(method, target, nil)
	repl := caddy.NewReplacer()
	repl.Set("http.request.uuid", uuid)
	return req.WithContext(context.WithValue(req.Context(), caddy.ReplacerCtxKey, repl))
}

func newHandler(mode string) (*Handler, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	return &Handler{Mode: mode, logger: zap.New(core)}, logs
}

func failWith(err error) caddyhttp.Handler {
	return caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return err })
}

// decodeObject decodes a JSON object body, failing the test otherwise.
func decodeObject(t *testing.T, body string) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatalf("body %q is not a JSON object: %v", body, err)
	}
	return m
}

func TestServeHTTPV2Envelope(t *testing.T) {
	withHeader := apierr.New(402, "insufficient_credits", "top up")
	withHeader.Header = http.Header{"X-Committed-Spend": []string{"0"}}
	tests := []struct {
		name        string
		err         error
		status      int
		code        string
		details     string // raw JSON of error.details
		retryAfter  string
		extraHeader [2]string
	}{
		{"no details is null", apierr.NotFound("job not found"), 404, "not_found", "null", "", [2]string{}},
		{"details object", apierr.InvalidWorkflow("bad").WithDetails(map[string]any{"member": "inputs"}),
			422, "invalid_workflow", `{"member":"inputs"}`, "", [2]string{}},
		{"queue full retry-after", apierr.New(429, "queue_full", "full").WithRetryAfter(2), 429, "queue_full", "null", "2", [2]string{}},
		{"hash mismatch retry-after", apierr.HashMismatch("blake3:aa", "blake3:bb"), 409, "hash_mismatch",
			`{"computed_hash":"blake3:bb","expected_hash":"blake3:aa"}`, "1", [2]string{}},
		{"extra headers", withHeader, 402, "insufficient_credits", "null", "", [2]string{"X-Committed-Spend", "0"}},
		{"untyped is upstream_error", errors.New(secretCause), 500, "upstream_error", "null", "", [2]string{}},
		{"caddy 404", caddyhttp.Error(404, errors.New("no route")), 404, "not_found", "null", "", [2]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newHandler(ModeV2)
			rec := httptest.NewRecorder()
			err := h.ServeHTTP(rec, newRequest("POST", "/api/v2/jobs", "req-abc"), failWith(tt.err))
			if err != nil {
				t.Fatalf("ServeHTTP returned %v; the envelope must swallow handled errors", err)
			}
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			hdr := rec.Header()
			if got := hdr.Get("X-Request-Id"); got != "req-abc" {
				t.Fatalf("X-Request-Id = %q, want req-abc", got)
			}
			if got := hdr.Get("Content-Type"); got != "application/json" {
				t.Fatalf("Content-Type = %q", got)
			}
			if got := hdr.Get("Retry-After"); got != tt.retryAfter {
				t.Fatalf("Retry-After = %q, want %q", got, tt.retryAfter)
			}
			if tt.extraHeader[0] != "" && hdr.Get(tt.extraHeader[0]) != tt.extraHeader[1] {
				t.Fatalf("%s = %q, want %q", tt.extraHeader[0], hdr.Get(tt.extraHeader[0]), tt.extraHeader[1])
			}
			if hdr.Get("X-Service-Error-Type") != "" {
				t.Fatal("v2 mode set X-Service-Error-Type")
			}
			body := rec.Body.String()
			top := decodeObject(t, body)
			if len(top) != 1 || top["error"] == nil {
				t.Fatalf("body %s: want exactly the error member", body)
			}
			inner := decodeObject(t, string(top["error"]))
			for _, k := range []string{"code", "message", "details"} {
				if _, ok := inner[k]; !ok {
					t.Fatalf("error.%s missing in %s", k, body)
				}
			}
			var code, msg string
			_ = json.Unmarshal(inner["code"], &code)
			_ = json.Unmarshal(inner["message"], &msg)
			if code != tt.code || msg == "" {
				t.Fatalf("error = %s %q, want %s", code, msg, tt.code)
			}
			if string(inner["details"]) != tt.details {
				t.Fatalf("details = %s, want %s", inner["details"], tt.details)
			}
			if strings.Contains(body, "10.0.0.7") || strings.Contains(body, "password") {
				t.Fatalf("body leaks the cause: %s", body)
			}
		})
	}
}

func TestServeHTTPSuccessPassesThrough(t *testing.T) {
	h, logs := newHandler(ModeV2)
	rec := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusCreated)
		_, err := w.Write([]byte(`{"ok":true}`))
		return err
	})
	if err := h.ServeHTTP(rec, newRequest("GET", "/api/v2/jobs", "req-ok"), next); err != nil {
		t.Fatal(err)
	}
	if rec.Code != http.StatusCreated || rec.Body.String() != `{"ok":true}` {
		t.Fatalf("response rewritten: %d %s", rec.Code, rec.Body)
	}
	if rec.Header().Get("X-Request-Id") != "req-ok" {
		t.Fatalf("X-Request-Id = %q on success", rec.Header().Get("X-Request-Id"))
	}
	if logs.Len() != 0 {
		t.Fatalf("success was logged: %v", logs.All())
	}
}

func TestServeHTTPStartedResponseNotRewritten(t *testing.T) {
	tests := []struct {
		name  string
		write func(w http.ResponseWriter)
		code  int
		body  string
	}{
		{"header only", func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) }, 200, ""},
		{"body started", func(w http.ResponseWriter) { _, _ = w.Write([]byte("data: partial\n")) }, 200, "data: partial\n"},
		{"status then body", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte("x"))
		}, 202, "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, logs := newHandler(ModeV2)
			rec := httptest.NewRecorder()
			next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				tt.write(w)
				return errors.New(secretCause)
			})
			if err := h.ServeHTTP(rec, newRequest("GET", "/api/v2/jobs/x/events", "req-late"), next); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Fatalf("started response was rewritten: %d %q", rec.Code, rec.Body.String())
			}
			// The failure is still logged with the request id.
			entries := logs.FilterField(zap.String("request_id", "req-late")).All()
			if len(entries) != 1 || entries[0].Level != zapcore.ErrorLevel {
				t.Fatalf("want one error log with the request id, got %v", logs.All())
			}
		})
	}
}

func TestServeHTTPDropsStaleContentLength(t *testing.T) {
	h, _ := newHandler(ModeV2)
	rec := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Length", "3")
		w.Header().Set("Content-Type", "image/png")
		return apierr.NotFound("asset not found")
	})
	if err := h.ServeHTTP(rec, newRequest("GET", "/api/v2/assets/x/content", "r"), next); err != nil {
		t.Fatal(err)
	}
	if cl := rec.Header().Get("Content-Length"); cl != "" {
		t.Fatalf("stale Content-Length %q kept", cl)
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type = %q", ct)
	}
}

func TestServeHTTPLogging(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		level zapcore.Level
	}{
		{"5xx at error with cause", errors.New(secretCause), zapcore.ErrorLevel},
		{"4xx at debug", apierr.NotFound("x"), zapcore.DebugLevel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, logs := newHandler(ModeV2)
			rec := httptest.NewRecorder()
			_ = h.ServeHTTP(rec, newRequest("GET", "/api/v2/jobs", "req-log"), failWith(tt.err))
			all := logs.All()
			if len(all) != 1 || all[0].Level != tt.level {
				t.Fatalf("logs = %v, want one entry at %v", all, tt.level)
			}
			ctx := all[0].ContextMap()
			if ctx["request_id"] != "req-log" {
				t.Fatalf("log request_id = %v", ctx["request_id"])
			}
			if msg, _ := ctx["error"].(string); !strings.Contains(msg, tt.err.Error()) {
				t.Fatalf("log error = %q, want the real cause", msg)
			}
		})
	}
}

func TestServeHTTPWithoutReplacer(t *testing.T) {
	h, _ := newHandler(ModeV2)
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/api/v2/jobs", nil)
	if err := h.ServeHTTP(rec, req, failWith(apierr.Forbidden())); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 403 {
		t.Fatalf("status %d", rec.Code)
	}
}

func TestServeHTTPRouterMode(t *testing.T) {
	tests := []struct {
		name      string
		err       error
		status    int
		errorType string
		body      map[string]any
	}{
		{"plain bucket", apierr.New(404, "model_not_found", "no such model"), 404, "model_not_found",
			map[string]any{"detail": "no such model", "error_type": "model_not_found"}},
		{"extra detail keys", apierr.New(400, "content_policy_violation", "refused").
			WithDetails(map[string]any{"charges_on_policy_rejection": "no"}), 400, "content_policy_violation",
			map[string]any{"detail": "refused", "error_type": "content_policy_violation", "charges_on_policy_rejection": "no"}},
		{"details cannot override", apierr.New(403, "forbidden", "nope").
			WithDetails(map[string]any{"error_type": "spoofed", "detail": "spoofed"}), 403, "forbidden",
			map[string]any{"detail": "nope", "error_type": "forbidden"}},
		{"422 list form", apierr.New(422, "invalid_input", "validation failed").
			WithDetails(map[string]any{"detail": []any{map[string]any{"loc": []any{"body", "prompt"}, "msg": "field required", "type": "missing"}}}),
			422, "invalid_input",
			map[string]any{"detail": []any{map[string]any{"loc": []any{"body", "prompt"}, "msg": "field required", "type": "missing"}}}},
		{"untyped", errors.New(secretCause), 500, "upstream_error",
			map[string]any{"detail": apierr.Upstream(nil).Message, "error_type": "upstream_error"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, _ := newHandler(ModeRouter)
			rec := httptest.NewRecorder()
			if err := h.ServeHTTP(rec, newRequest("POST", "/v1/models/x", "svc-1"), failWith(tt.err)); err != nil {
				t.Fatal(err)
			}
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			if got := rec.Header().Get("X-Service-Request-Id"); got != "svc-1" {
				t.Fatalf("X-Service-Request-Id = %q", got)
			}
			if rec.Header().Get("X-Request-Id") != "" {
				t.Fatal("router mode set X-Request-Id")
			}
			if got := rec.Header().Get("X-Service-Error-Type"); got != tt.errorType {
				t.Fatalf("X-Service-Error-Type = %q, want %q", got, tt.errorType)
			}
			// The public Comfy router's names, which the official SDKs read.
			if got := rec.Header().Get("X-Comfy-Request-Id"); got != "svc-1" {
				t.Fatalf("X-Comfy-Request-Id = %q, want the request id", got)
			}
			if got := rec.Header().Get("X-Comfy-Error-Type"); got != tt.errorType {
				t.Fatalf("X-Comfy-Error-Type = %q, want %q", got, tt.errorType)
			}
			var body map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &body); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			want, _ := json.Marshal(tt.body)
			got, _ := json.Marshal(body)
			if string(got) != string(want) {
				t.Fatalf("body = %s, want %s", got, want)
			}
		})
	}
}

func TestRequestIDHeader(t *testing.T) {
	if RequestIDHeader(ModeV2) != "X-Request-Id" || RequestIDHeader(ModeRouter) != "X-Service-Request-Id" || RequestIDHeader("") != "X-Request-Id" {
		t.Fatal("RequestIDHeader mapping changed")
	}
}

func TestValidate(t *testing.T) {
	for mode, ok := range map[string]bool{ModeV2: true, ModeRouter: true, "v3": false, "": false} {
		if err := (&Handler{Mode: mode}).Validate(); (err == nil) != ok {
			t.Errorf("Validate(%q) = %v, want ok=%v", mode, err, ok)
		}
	}
}

// A failed request's log line names its path but not its query, which may
// carry a credential (comfy_auth query_param).
func TestLogLeavesOutTheQuery(t *testing.T) {
	for _, status := range []int{401, 500} {
		h, logs := newHandler(ModeV2)
		req := newRequest("GET", "/api/v2/jobs?token=cgk_secret_value&limit=5", "req-q")
		_ = h.ServeHTTP(httptest.NewRecorder(), req, failWith(apierr.New(status, "x", "m")))
		entries := logs.All()
		if len(entries) != 1 {
			t.Fatalf("status %d: %d log entries, want 1", status, len(entries))
		}
		fields := entries[0].ContextMap()
		if fields["path"] != "/api/v2/jobs" {
			t.Fatalf("status %d: path = %v, want /api/v2/jobs", status, fields["path"])
		}
		for k, v := range fields {
			if strings.Contains(fmt.Sprint(v), "cgk_secret_value") {
				t.Fatalf("status %d: field %s = %v repeats the query's credential", status, k, v)
			}
		}
	}
}
