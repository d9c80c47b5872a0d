package comfyauth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/storage"
)

// TestBrowsersCaddyfile: allow_origin in every mode (repeatable, several
// per line), allow_host in mode none only.
func TestBrowsersCaddyfile(t *testing.T) {
	tests := []struct {
		input   string
		origins []string
		hosts   []string
		ok      bool
	}{
		{"comfy_auth none {\n allow_origin https://a.example http://localhost:3000\n allow_origin https://b.example\n allow_host gpu.lan\n}",
			[]string{"https://a.example", "http://localhost:3000", "https://b.example"}, []string{"gpu.lan"}, true},
		{"comfy_auth none acct {\n allow_host a.lan b.lan\n}", nil, []string{"a.lan", "b.lan"}, true},
		{"comfy_auth api_keys {\n query_param token\n allow_origin https://a.example\n}", []string{"https://a.example"}, nil, true},
		{"comfy_auth static_token abc {\n allow_origin https://a.example\n}", []string{"https://a.example"}, nil, true},
		{"comfy_auth jwt {\n key HS256 secret s\n allow_origin https://a.example\n}", []string{"https://a.example"}, nil, true},
		{"comfy_auth api_keys {\n allow_host gpu.lan\n}", nil, nil, false},
		{"comfy_auth jwt {\n key HS256 secret s\n allow_host gpu.lan\n}", nil, nil, false},
		{"comfy_auth none {\n allow_origin\n}", nil, nil, false},
		{"comfy_auth none {\n allow_host\n}", nil, nil, false},
	}
	for _, tc := range tests {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		if (err == nil) != tc.ok {
			t.Errorf("%q: err %v, want ok %v", tc.input, err, tc.ok)
			continue
		}
		if err == nil && (!slices.Equal(h.AllowOrigins, tc.origins) || !slices.Equal(h.AllowHosts, tc.hosts)) {
			t.Errorf("%q: origins %q hosts %q, want %q %q", tc.input, h.AllowOrigins, h.AllowHosts, tc.origins, tc.hosts)
		}
	}
	if (&Handler{Mode: ModeAPIKeys, AllowHosts: []string{"gpu.lan"}}).Validate() == nil {
		t.Error("allow_host accepted with api_keys (JSON config)")
	}
}

// TestBrowsersProvision: a bad origin or host fails the config.
func TestBrowsersProvision(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	for _, h := range []*Handler{
		{Mode: ModeNone, AllowOrigins: []string{"app.example.com"}},
		{Mode: ModeNone, AllowOrigins: []string{"https://app.example.com/path"}},
		{Mode: ModeNone, AllowHosts: []string{"gpu.lan:8189"}},
	} {
		if err := h.Provision(ctx); err == nil {
			t.Errorf("%+v provisioned", h)
		}
	}
}

// TestBrowsersServe: comfy_auth applies the policy before it
// authenticates — in mode none with the Host check, in the modes with a
// credential without it — and answers an allowed origin's preflight
// itself.
func TestBrowsersServe(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	// live is a ready deployment of the local account, as comfy_deployment
	// resolves it by host (no mount) or by prefix.
	live := func(mount string) *deployments.Scope {
		return &deployments.Scope{ID: "live", Found: true, PoolReady: true, Mount: mount,
			Deployment: storage.Deployment{ID: "live", AccountID: "local", State: storage.DeploymentReady}}
	}
	none := &Handler{Mode: ModeNone, AllowOrigins: []string{"https://app.example.com"}, AllowHosts: []string{"gpu.lan"}}
	token := &Handler{Mode: ModeStaticToken, Token: "s3cret"}
	for _, h := range []*Handler{none, token} {
		if err := h.Provision(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		h      *Handler
		method string
		host   string
		header map[string]string
		scope  *deployments.Scope // comfy_deployment's, when set
		status int                // 0: passed to next; else the answer or refusal
	}{
		{"curl", none, "POST", "127.0.0.1:8189", nil, nil, 0},
		{"localhost", none, "POST", "localhost:8189", nil, nil, 0},
		{"an allowed name", none, "POST", "gpu.lan:8189", nil, nil, 0},
		{"same origin", none, "POST", "localhost:8189", map[string]string{"Origin": "http://localhost:8189", "Sec-Fetch-Site": "same-origin"}, nil, 0},
		{"cross-site text/plain", none, "POST", "127.0.0.1:8189", map[string]string{"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site", "Content-Type": "text/plain"}, nil, 403},
		{"Origin null", none, "POST", "127.0.0.1:8189", map[string]string{"Origin": "null"}, nil, 403},
		{"rebinding Host", none, "POST", "evil.example:8189", map[string]string{"Origin": "http://evil.example:8189", "Sec-Fetch-Site": "same-origin"}, nil, 403},
		{"rebinding Host, GET", none, "GET", "evil.example:8189", map[string]string{"Sec-Fetch-Site": "same-origin"}, nil, 403},
		{"allowed origin", none, "POST", "127.0.0.1:8189", map[string]string{"Origin": "https://app.example.com", "Sec-Fetch-Site": "cross-site"}, nil, 0},
		{"allowed origin's preflight", none, "OPTIONS", "127.0.0.1:8189", map[string]string{"Origin": "https://app.example.com", "Access-Control-Request-Method": "POST"}, nil, 204},
		{"foreign preflight", none, "OPTIONS", "127.0.0.1:8189", map[string]string{"Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}, nil, 403},
		{"token: any Host", token, "POST", "api.example.com", map[string]string{"Authorization": "Bearer s3cret"}, nil, 0},
		{"a deployment's own host", none, "POST", "live.run.example.com", nil, live(""), 0},
		{"a deployment's own host, cross-site", none, "POST", "live.run.example.com", map[string]string{"Origin": "https://evil.example"}, live(""), 403},
		{"a deployment by prefix: Host checked", none, "POST", "evil.example:8189", nil, live("/deployment/live"), 403},
		{"a deployment by prefix at 127.0.0.1", none, "POST", "127.0.0.1:8189", nil, live("/deployment/live"), 0},
		{"token: cross-site refused before the credential", token, "POST", "api.example.com", map[string]string{"Authorization": "Bearer s3cret", "Origin": "https://evil.example"}, nil, 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/api/v2/jobs", nil)
			r.Host = tc.host
			if tc.scope != nil {
				r = r.WithContext(deployments.WithScope(r.Context(), tc.scope))
			}
			for k, v := range tc.header {
				r.Header.Set(k, v)
			}
			w := httptest.NewRecorder()
			reached := false
			err := tc.h.ServeHTTP(w, r, handlerFunc(func(http.ResponseWriter, *http.Request) error {
				reached = true
				return nil
			}))
			switch {
			case tc.status == 0 && (err != nil || !reached):
				t.Fatalf("err %v, reached next %v; want it served", err, reached)
			case tc.status == 403:
				if e, ok := apierr.As(err); !ok || e.Status != 403 || e.Code != "forbidden" || reached {
					t.Fatalf("err %v, reached next %v; want 403 forbidden", err, reached)
				}
			case tc.status == 204 && (err != nil || reached || w.Code != 204 || w.Header().Get("Access-Control-Allow-Origin") == ""):
				t.Fatalf("err %v, reached %v, answered %d %v; want 204 with CORS", err, reached, w.Code, w.Header())
			}
		})
	}
}
