package comfyauth

import (
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/browsersafe"
	"github.com/comfygate/comfygate/internal/principal"
)

// TestQueryParam: with query_param, a static token may come in the query
// (only without an Authorization header) and is removed from the request
// the next handler sees.
func TestQueryParam(t *testing.T) {
	h := &Handler{Mode: ModeStaticToken, Token: "s3cret", Account: "local", QueryParam: "token", logger: zap.NewNop(),
		browsers: &browsersafe.Policy{}}
	h.tokenDigest = sha256.Sum256([]byte(h.Token))
	tests := []struct {
		name, target, auth string
		ok                 bool
		seenQuery          string
	}{
		{"token in the query", "/ws?clientId=c&token=s3cret", "", true, "clientId=c"},
		{"bearer header", "/ws?clientId=c", "Bearer s3cret", true, "clientId=c"},
		{"wrong token in the query", "/ws?token=nope", "", false, ""},
		{"an Authorization header wins over the query", "/ws?token=s3cret", "Basic eDp5", false, ""},
		{"no token", "/ws", "", false, ""},
		{"an empty parameter", "/ws?token=", "", false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, tc.target, nil)
			if tc.auth != "" {
				r.Header.Set("Authorization", tc.auth)
			}
			var seen *http.Request
			err := h.ServeHTTP(httptest.NewRecorder(), r, handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
				seen = r
				return nil
			}))
			if !tc.ok {
				if e, ok := apierr.As(err); !ok || e.Status != http.StatusUnauthorized {
					t.Fatalf("err = %v, want 401", err)
				}
				return
			}
			if err != nil || seen == nil {
				t.Fatalf("err = %v", err)
			}
			if p, _ := principal.From(seen.Context()); p.AccountID != "local" {
				t.Errorf("principal %+v", p)
			}
			if seen.URL.RawQuery != tc.seenQuery {
				t.Errorf("next saw query %q, want %q", seen.URL.RawQuery, tc.seenQuery)
			}
		})
	}
	// Without query_param the query is not read.
	plain := *h
	plain.QueryParam = ""
	err := plain.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/ws?token=s3cret", nil),
		handlerFunc(func(http.ResponseWriter, *http.Request) error { return nil }))
	if e, ok := apierr.As(err); !ok || e.Status != http.StatusUnauthorized {
		t.Errorf("a query token without query_param: %v", err)
	}
}

type handlerFunc func(http.ResponseWriter, *http.Request) error

func (f handlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }

// TestQueryParamCaddyfile: where query_param is accepted.
func TestQueryParamCaddyfile(t *testing.T) {
	tests := []struct {
		input string
		param string
		ok    bool
	}{
		{"comfy_auth api_keys {\n query_param token\n}", "token", true},
		{"comfy_auth static_token abc acct {\n query_param key\n}", "key", true},
		{"comfy_auth api_keys", "", true},
		{"comfy_auth none {\n query_param token\n}", "", false},
		{"comfy_auth api_keys {\n query_param\n}", "", false},
		{"comfy_auth api_keys {\n query_param a b\n}", "", false},
		{"comfy_auth api_keys {\n other x\n}", "", false},
	}
	for _, tc := range tests {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if (err == nil) != tc.ok || (tc.ok && h.QueryParam != tc.param) {
			t.Errorf("%q: param %q, err %v", tc.input, h.QueryParam, err)
		}
		if err == nil {
			if verr := h.Validate(); verr != nil && h.Mode != ModeStaticToken {
				t.Errorf("%q: Validate: %v", tc.input, verr)
			}
		}
	}
	jwt := Handler{Mode: ModeJWT, QueryParam: "token"}
	if jwt.Validate() == nil {
		t.Error("query_param accepted in jwt mode")
	}
}
