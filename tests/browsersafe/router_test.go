package browsersafe

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// jwtSecret signs the router's test tokens (HS256 wants 32 bytes or more).
const jwtSecret = "browsersafe-router-test-secret-0123456789"

// routerGateway runs the model router with one model on a partner peer
// and the comfy_auth jwt block's extra lines (allow_origin …).
func routerGateway(t *testing.T, peer *partner.Peer, authLines string) *gateway.Gateway {
	t.Helper()
	dir := t.TempDir()
	header, value := peer.Credential()
	scheme, secret, _ := strings.Cut(value, " ")
	cat, _ := json.Marshal(map[string]any{"models": []any{map[string]any{
		"id": "test/echo", "adapter": "http", "upstream": peer.URL + "/echo", "price_cents": 1,
		"credential": secret, "credential_header": map[string]string{"name": header, "prefix": scheme + " "},
		"billing": map[string]any{"charges_on_policy_rejection": "no"},
	}}})
	catalog := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(catalog, cat, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := gateway.RouterConfig("storage embedded ./data", gateway.RouterSite{JWTSecret: jwtSecret, Catalog: catalog})
	if authLines != "" {
		key := "key HS256 secret " + jwtSecret
		if !strings.Contains(cfg, key) {
			t.Fatalf("the router config has no line %q", key)
		}
		cfg = strings.Replace(cfg, key, key+"\n\t\t\t"+authLines, 1)
	}
	return gateway.Start(t, cfg, gateway.Options{Dir: dir})
}

// routerToken is a valid token of workspace ws.
func routerToken(t *testing.T, ws string) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"workspace_id": ws, "exp": time.Now().Add(time.Hour).Unix()}).
		SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routerForbidden checks a 403 in the router's contract: the body
// {detail, error_type: forbidden} and X-Service-Error-Type.
func routerForbidden(t *testing.T, what string, a answer) {
	t.Helper()
	var body struct {
		Detail    string `json:"detail"`
		ErrorType string `json:"error_type"`
	}
	if a.status != http.StatusForbidden || json.Unmarshal(a.body, &body) != nil || body.ErrorType != "forbidden" || body.Detail == "" {
		t.Errorf("%s: %d %s, want 403 {detail, error_type: forbidden}", what, a.status, short(a.body))
	}
	if a.header.Get("X-Service-Error-Type") != "forbidden" || a.header.Get("X-Service-Request-Id") == "" {
		t.Errorf("%s: X-Service-Error-Type %q, X-Service-Request-Id %q", what, a.header.Get("X-Service-Error-Type"), a.header.Get("X-Service-Request-Id"))
	}
}

// TestRouterRefusesBrowserCalls: a page of another site cannot make a
// browser call a model — with or without the user's token (a page has
// none, but a credential is no reason to serve it) — and the refusal is
// the router's 403; nothing reaches the partner. Callers without a browser
// call it as before, at any Host (the router authenticates every call).
func TestRouterRefusesBrowserCalls(t *testing.T) {
	t.Parallel()
	peer := partner.NewSyncJSON(t)
	g := routerGateway(t, peer, "")
	call := g.URL + "/v1/models/test/echo"
	input := []byte(`{"prompt": "a cat"}`)
	tok := headers{"Authorization": "Bearer " + routerToken(t, "ws-a"), "Content-Type": "application/json"}

	for what, h := range map[string]headers{
		"cross-site text/plain call":             crossSite.with(headers{"Content-Type": "text/plain"}),
		"cross-site call with a token":           tok.with(crossSite),
		"Origin: null call with a token":         tok.with(nullOrigin),
		"older browser's call":                   tok.with(oldBrowser),
		"Sec-Fetch-Site cross-site with a token": tok.with(siteOnly),
	} {
		routerForbidden(t, what, send(t, http.MethodPost, call, input, h))
	}
	routerForbidden(t, "cross-site call under /v2/models", send(t, http.MethodPost, g.URL+"/v2/models/test/echo", input, tok.with(crossSite)))
	routerForbidden(t, "foreign preflight", send(t, http.MethodOptions, call, nil,
		headers{"Origin": evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "authorization,content-type"}))
	if n := peer.Requests(); n != 0 {
		t.Errorf("%d refused calls reached the partner", n)
	}

	status(t, "a call", send(t, http.MethodPost, call, input, tok), http.StatusOK)
	status(t, "a call at another name", send(t, http.MethodPost, call, input, tok.with(headers{"Host": "router.example.com"})), http.StatusOK)
	status(t, "the catalog, cross-site (a read)", send(t, http.MethodGet, g.URL+"/v1/models", nil, tok.with(crossSite)), http.StatusOK)
	if n := peer.Requests(); n != 2 {
		t.Errorf("the partner got %d calls, want 2", n)
	}
}

// TestRouterAllowedOrigin: the router answers an allowed origin's
// preflight and lets its page read the answers, error headers included.
func TestRouterAllowedOrigin(t *testing.T) {
	t.Parallel()
	const app = "https://studio.example.com"
	peer := partner.NewSyncJSON(t)
	g := routerGateway(t, peer, "allow_origin "+app)
	call := g.URL + "/v1/models/test/echo"
	fromApp := headers{"Origin": app, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}

	pre := send(t, http.MethodOptions, call, nil, fromApp.with(headers{"Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "authorization,content-type,idempotency-key"}))
	status(t, "allowed preflight", pre, http.StatusNoContent)
	if pre.header.Get("Access-Control-Allow-Origin") != app || !strings.Contains(pre.header.Get("Access-Control-Allow-Headers"), "authorization") {
		t.Errorf("allowed preflight headers: %v", pre.header)
	}
	a := send(t, http.MethodPost, call, []byte(`{"prompt": "a cat"}`), fromApp.with(headers{
		"Authorization": "Bearer " + routerToken(t, "ws-b"), "Content-Type": "application/json"}))
	status(t, "allowed origin's call", a, http.StatusOK)
	if a.header.Get("Access-Control-Allow-Origin") != app || a.header.Get("Access-Control-Expose-Headers") != "*" {
		t.Errorf("allowed origin's call headers: %v", a.header)
	}
	noTok := send(t, http.MethodPost, call, []byte(`{}`), fromApp.with(headers{"Content-Type": "application/json"}))
	if noTok.status != http.StatusUnauthorized || noTok.header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("allowed origin without a token: %d, Access-Control-Allow-Origin %q (its page must read the 401)",
			noTok.status, noTok.header.Get("Access-Control-Allow-Origin"))
	}
	routerForbidden(t, "another origin", send(t, http.MethodPost, call, []byte(`{}`), crossSite.with(headers{"Content-Type": "text/plain"})))
}
