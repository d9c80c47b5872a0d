package comfyauth

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/golang-jwt/jwt/v5"
	"go.uber.org/zap"

	"github.com/comfygate/comfygate/internal/apierr"
)

const testSecret = "comfyauth-jwt-test-secret-0123456789abcdef"

func jwtHandler(t *testing.T) *Handler {
	t.Helper()
	d := caddyfile.NewTestDispenser(`comfy_auth jwt {
		key HS256 secret ` + testSecret + ` k1
		issuer https://iss
		audience router
		leeway 30s
		workspace_claim ws
	}`)
	h := &Handler{}
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Mode != ModeJWT || h.JWT == nil || len(h.JWT.Keys) != 1 || h.JWT.Keys[0].ID != "k1" || h.JWT.Leeway != 30*time.Second {
		t.Fatalf("parsed %+v / %+v", h, h.JWT)
	}
	h.logger = zap.NewNop()
	if err := h.provisionJWT(); err != nil {
		t.Fatal(err)
	}
	return h
}

func sign(t *testing.T, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(jwt.SigningMethodHS256, c)
	tok.Header["kid"] = "k1"
	s, err := tok.SignedString([]byte(testSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestJWTMode(t *testing.T) {
	h := jwtHandler(t)
	exp := time.Now().Add(time.Hour).Unix()
	base := func() jwt.MapClaims {
		return jwt.MapClaims{"iss": "https://iss", "aud": "router", "exp": exp, "ws": "w1", "entitlements": []string{"beta"}}
	}
	for _, c := range []struct {
		name   string
		claims jwt.MapClaims
		header string
		status int
		code   string
	}{
		{name: "valid", claims: base()},
		{name: "no token", status: 401, code: "unauthorized"},
		{name: "wrong issuer", claims: func() jwt.MapClaims { m := base(); m["iss"] = "x"; return m }(), status: 401, code: "unauthorized"},
		{name: "no exp", claims: func() jwt.MapClaims { m := base(); delete(m, "exp"); return m }(), status: 401, code: "unauthorized"},
		{name: "router off", claims: func() jwt.MapClaims { m := base(); m["router_enabled"] = false; return m }(), status: 403, code: "not_enabled"},
		{name: "basic scheme", header: "Basic abc", status: 401, code: "unauthorized"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
			switch {
			case c.header != "":
				r.Header.Set("Authorization", c.header)
			case c.claims != nil:
				r.Header.Set("Authorization", "Bearer "+sign(t, c.claims))
			}
			p, err := h.authenticate(r)
			if c.status == 0 {
				if err != nil || p.WorkspaceID != "w1" || len(p.Entitlements) != 1 || !p.RouterEnabled {
					t.Fatalf("principal %+v, err %v", p, err)
				}
				return
			}
			var e *apierr.Error
			if !errors.As(err, &e) || e.Status != c.status || e.Code != c.code {
				t.Fatalf("err %v, want %d %s", err, c.status, c.code)
			}
		})
	}
}
