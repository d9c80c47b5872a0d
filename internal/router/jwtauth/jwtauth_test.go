package jwtauth

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

const (
	secret1 = "0123456789abcdef0123456789abcdef-one"
	secret2 = "0123456789abcdef0123456789abcdef-two"
	issuer  = "https://issuer.example"
	aud     = "router"
)

var now = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

type testKeys struct {
	rsa, rsaOther *rsa.PrivateKey
	ec256, ec384  *ecdsa.PrivateKey
	ed            ed25519.PrivateKey
}

var (
	keysOnce sync.Once
	keys     testKeys
)

func getKeys(t *testing.T) testKeys {
	t.Helper()
	keysOnce.Do(func() {
		var err error
		must := func(e error) {
			if e != nil && err == nil {
				err = e
			}
		}
		keys.rsa, err = rsa.GenerateKey(rand.Reader, 2048)
		k2, e := rsa.GenerateKey(rand.Reader, 2048)
		must(e)
		keys.rsaOther = k2
		keys.ec256, e = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(e)
		keys.ec384, e = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
		must(e)
		_, keys.ed, e = ed25519.GenerateKey(rand.Reader)
		must(e)
		if err != nil {
			panic(err)
		}
	})
	return keys
}

func pubPEM(t *testing.T, pub crypto.PublicKey) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

// sign makes a token; claims nil means a valid default claim set.
func sign(t *testing.T, method jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	if claims == nil {
		claims = good()
	}
	tok := jwt.NewWithClaims(method, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func good() jwt.MapClaims {
	return jwt.MapClaims{
		"iss": issuer, "aud": aud, "sub": "user-1", "workspace_id": "ws-1",
		"exp": now.Add(time.Hour).Unix(), "entitlements": []string{"beta"}, "router_enabled": true,
	}
}

func with(mod func(jwt.MapClaims)) jwt.MapClaims {
	c := good()
	mod(c)
	return c
}

// baseVerifier trusts an HS256 secret (kid h1), an RS256 key (kid r1), an
// ES256 key from a file (no kid) and an EdDSA key (kid e1).
func baseVerifier(t *testing.T, mod func(*Config)) *Verifier {
	t.Helper()
	k := getKeys(t)
	dir := t.TempDir()
	ecFile := filepath.Join(dir, "ec.pem")
	if err := os.WriteFile(ecFile, []byte(pubPEM(t, &k.ec256.PublicKey)), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := Config{
		Keys: []KeyConfig{
			{ID: "h1", Algorithm: "HS256", Secret: secret1},
			{ID: "r1", Algorithm: "RS256", PEM: pubPEM(t, &k.rsa.PublicKey)},
			{Algorithm: "ES256", PEMFile: ecFile},
			{ID: "e1", Algorithm: "EdDSA", PEM: pubPEM(t, k.ed.Public())},
		},
		Issuer: issuer, Audience: aud,
	}
	if mod != nil {
		mod(&cfg)
	}
	v, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

func TestVerify(t *testing.T) {
	k := getKeys(t)
	v := baseVerifier(t, nil)
	rsaPubPEM := pubPEM(t, &k.rsa.PublicKey)
	noneToken := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString(mustJSON(t, good())) + "."
	tests := []struct {
		name  string
		token string
		want  error // nil, ErrUnauthorized or ErrNotEnabled
		ws    string
	}{
		{"HS256 by kid", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), nil), nil, "ws-1"},
		{"RS256 by kid", sign(t, jwt.SigningMethodRS256, "r1", k.rsa, nil), nil, "ws-1"},
		{"ES256 without kid", sign(t, jwt.SigningMethodES256, "", k.ec256, nil), nil, "ws-1"},
		{"EdDSA by kid", sign(t, jwt.SigningMethodEdDSA, "e1", k.ed, nil), nil, "ws-1"},
		{"alg none", noneToken, ErrUnauthorized, ""},
		{"HMAC with the RSA public key as secret", sign(t, jwt.SigningMethodHS256, "r1", []byte(rsaPubPEM), nil), ErrUnauthorized, ""},
		{"RS384 on an RS256 key", sign(t, jwt.SigningMethodRS384, "r1", k.rsa, nil), ErrUnauthorized, ""},
		{"PS256 on an RS256 key", sign(t, jwt.SigningMethodPS256, "r1", k.rsa, nil), ErrUnauthorized, ""},
		{"wrong RSA key", sign(t, jwt.SigningMethodRS256, "r1", k.rsaOther, nil), ErrUnauthorized, ""},
		{"wrong secret", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret2), nil), ErrUnauthorized, ""},
		{"HS256 without kid: h1 is not anonymous", sign(t, jwt.SigningMethodHS256, "", []byte(secret1), nil), ErrUnauthorized, ""},
		{"unknown kid falls back to anonymous keys", sign(t, jwt.SigningMethodES256, "zz", k.ec256, nil), nil, "ws-1"},
		{"ES256 with a P-384 key", sign(t, jwt.SigningMethodES384, "", k.ec384, nil), ErrUnauthorized, ""},
		{"expired", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["exp"] = now.Add(-time.Second).Unix() })), ErrUnauthorized, ""},
		{"exp missing", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { delete(c, "exp") })), ErrUnauthorized, ""},
		{"exp not a number", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["exp"] = "tomorrow" })), ErrUnauthorized, ""},
		{"nbf in the future", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["nbf"] = now.Add(time.Minute).Unix() })), ErrUnauthorized, ""},
		{"bad iss", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" })), ErrUnauthorized, ""},
		{"missing iss", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { delete(c, "iss") })), ErrUnauthorized, ""},
		{"bad aud", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["aud"] = "other" })), ErrUnauthorized, ""},
		{"aud array containing ours", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["aud"] = []string{"x", aud} })), nil, "ws-1"},
		{"workspace falls back to sub", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { delete(c, "workspace_id") })), nil, "user-1"},
		{"no workspace at all", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { delete(c, "workspace_id"); delete(c, "sub") })), ErrUnauthorized, ""},
		{"workspace not a string", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["workspace_id"] = 7 })), ErrUnauthorized, ""},
		{"entitlements not an array", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["entitlements"] = "beta" })), ErrUnauthorized, ""},
		{"entitlements with a number", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["entitlements"] = []any{"a", 1} })), ErrUnauthorized, ""},
		{"router_enabled false", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["router_enabled"] = false })), ErrNotEnabled, "ws-1"},
		{"router_enabled null", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["router_enabled"] = nil })), ErrNotEnabled, "ws-1"},
		{"router_enabled absent: enabled by default", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { delete(c, "router_enabled") })), nil, "ws-1"},
		{"router_enabled a string", sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), with(func(c jwt.MapClaims) { c["router_enabled"] = "true" })), ErrUnauthorized, ""},
		{"garbage", "not.a.jwt", ErrUnauthorized, ""},
		{"empty", "", ErrUnauthorized, ""},
		{"oversized", strings.Repeat("a", MaxTokenLen+1), ErrUnauthorized, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := v.Verify(tc.token, now)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
			} else if !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
			if errors.Is(err, ErrUnauthorized) && errors.Is(err, ErrNotEnabled) {
				t.Fatal("an error must be one bucket")
			}
			if err != nil && len(tc.token) > 20 && strings.Contains(err.Error(), tc.token[len(tc.token)-20:]) {
				t.Fatal("error leaks the token")
			}
			if c.Workspace != tc.ws {
				t.Fatalf("workspace %q, want %q", c.Workspace, tc.ws)
			}
		})
	}
}

func TestVerifyClaimsAndOptions(t *testing.T) {
	mk := func(c jwt.MapClaims) string { return sign(t, jwt.SigningMethodHS256, "h1", []byte(secret1), c) }
	tests := []struct {
		name    string
		mod     func(*Config)
		token   string
		want    error
		ents    []string
		enabled bool
	}{
		{"defaults", nil, mk(nil), nil, []string{"beta"}, true},
		{"no entitlements claim", nil, mk(with(func(c jwt.MapClaims) { delete(c, "entitlements") })), nil, nil, true},
		{"require enabled claim: absent", func(c *Config) { c.RequireEnabledClaim = true },
			mk(with(func(c jwt.MapClaims) { delete(c, "router_enabled") })), ErrNotEnabled, []string{"beta"}, false},
		{"require enabled claim: true", func(c *Config) { c.RequireEnabledClaim = true }, mk(nil), nil, []string{"beta"}, true},
		{"custom claim names", func(c *Config) {
			c.WorkspaceClaim, c.EntitlementsClaim, c.EnabledClaim = "org", "groups", "can_route"
		}, mk(jwt.MapClaims{"iss": issuer, "aud": aud, "exp": now.Add(time.Minute).Unix(),
			"org": "ws-9", "groups": []string{"g1", "g2"}, "can_route": true, "router_enabled": false}), nil, []string{"g1", "g2"}, true},
		{"leeway admits slightly expired", func(c *Config) { c.Leeway = 45 * time.Second },
			mk(with(func(c jwt.MapClaims) { c["exp"] = now.Add(-30 * time.Second).Unix() })), nil, []string{"beta"}, true},
		{"leeway has a limit", func(c *Config) { c.Leeway = 45 * time.Second },
			mk(with(func(c jwt.MapClaims) { c["exp"] = now.Add(-50 * time.Second).Unix() })), ErrUnauthorized, nil, false},
		{"no iss/aud configured: not checked", func(c *Config) { c.Issuer, c.Audience = "", "" },
			mk(with(func(c jwt.MapClaims) { delete(c, "iss"); delete(c, "aud") })), nil, []string{"beta"}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := baseVerifier(t, tc.mod)
			c, err := v.Verify(tc.token, now)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("want %v, got %v", tc.want, err)
			}
			if err != nil && tc.want == ErrUnauthorized {
				return
			}
			if strings.Join(c.Entitlements, ",") != strings.Join(tc.ents, ",") || c.Enabled != tc.enabled {
				t.Fatalf("claims %+v", c)
			}
		})
	}
}

func TestKidSelection(t *testing.T) {
	v, err := New(Config{Keys: []KeyConfig{
		{ID: "k1", Algorithm: "HS256", Secret: secret1},
		{ID: "k2", Algorithm: "HS256", Secret: secret2},
	}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, kid, secret string
		ok                bool
	}{
		{"k1 signed by k1", "k1", secret1, true},
		{"k2 signed by k2", "k2", secret2, true},
		{"k1 signed by k2", "k1", secret2, false},
		{"unknown kid, no anonymous keys", "k3", secret1, false},
		{"no kid, no anonymous keys", "", secret1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(sign(t, jwt.SigningMethodHS256, tc.kid, []byte(tc.secret), nil), now)
			if (err == nil) != tc.ok {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64u(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func TestJWKSFile(t *testing.T) {
	k := getKeys(t)
	ecPub := k.ec256.PublicKey
	ecRaw, err := ecPub.Bytes() // 0x04 || X || Y
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]any{"keys": []map[string]any{
		{"kty": "RSA", "kid": "rsa-1", "alg": "RS256", "use": "sig", "n": b64u(k.rsa.N.Bytes()), "e": b64u([]byte{1, 0, 1})},
		{"kty": "RSA", "kid": "rsa-enc", "use": "enc", "n": b64u(k.rsaOther.N.Bytes()), "e": b64u([]byte{1, 0, 1})},
		{"kty": "EC", "kid": "ec-1", "crv": "P-256", "x": b64u(ecRaw[1:33]), "y": b64u(ecRaw[33:])},
		{"kty": "OKP", "kid": "ed-1", "crv": "Ed25519", "x": b64u(k.ed.Public().(ed25519.PublicKey))},
		{"kty": "oct", "kid": "hs-1", "alg": "HS512", "k": b64u([]byte(strings.Repeat("s", 64)))},
	}}
	dir := t.TempDir()
	path := filepath.Join(dir, "jwks.json")
	if err := os.WriteFile(path, mustJSON(t, set), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{JWKSFile: path, Issuer: issuer, Audience: aud}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	tests := []struct {
		name  string
		token string
		ok    bool
	}{
		{"RSA", sign(t, jwt.SigningMethodRS256, "rsa-1", k.rsa, nil), true},
		{"RSA as PS256 refused", sign(t, jwt.SigningMethodPS256, "rsa-1", k.rsa, nil), false},
		{"enc key skipped", sign(t, jwt.SigningMethodRS256, "rsa-enc", k.rsaOther, nil), false},
		{"EC alg from curve", sign(t, jwt.SigningMethodES256, "ec-1", k.ec256, nil), true},
		{"Ed25519", sign(t, jwt.SigningMethodEdDSA, "ed-1", k.ed, nil), true},
		{"oct HS512", sign(t, jwt.SigningMethodHS512, "hs-1", []byte(strings.Repeat("s", 64)), nil), true},
		{"oct as HS256 refused", sign(t, jwt.SigningMethodHS256, "hs-1", []byte(strings.Repeat("s", 64)), nil), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := v.Verify(tc.token, now)
			if (err == nil) != tc.ok {
				t.Fatalf("ok=%v, err=%v", tc.ok, err)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	k := getKeys(t)
	privDER, err := x509.MarshalPKCS8PrivateKey(k.ec256)
	if err != nil {
		t.Fatal(err)
	}
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER}))
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no keys", Config{}, "no verification keys"},
		{"leeway over 60s", Config{Keys: []KeyConfig{{Algorithm: "HS256", Secret: secret1}}, Leeway: 61 * time.Second}, "leeway"},
		{"negative leeway", Config{Keys: []KeyConfig{{Algorithm: "HS256", Secret: secret1}}, Leeway: -time.Second}, "leeway"},
		{"alg none", Config{Keys: []KeyConfig{{Algorithm: "none", Secret: secret1}}}, "not supported"},
		{"missing alg", Config{Keys: []KeyConfig{{Secret: secret1}}}, "not supported"},
		{"short secret", Config{Keys: []KeyConfig{{Algorithm: "HS256", Secret: "short"}}}, "at least 32"},
		{"secret with RS256", Config{Keys: []KeyConfig{{Algorithm: "RS256", Secret: secret1}}}, "secret cannot be used"},
		{"RSA key with ES256", Config{Keys: []KeyConfig{{Algorithm: "ES256", PEM: pubPEM(t, &k.rsa.PublicKey)}}}, "RSA key cannot"},
		{"P-384 key with ES256", Config{Keys: []KeyConfig{{Algorithm: "ES256", PEM: pubPEM(t, &k.ec384.PublicKey)}}}, "P-384"},
		{"Ed25519 with HS256", Config{Keys: []KeyConfig{{Algorithm: "HS256", PEM: pubPEM(t, k.ed.Public())}}}, "Ed25519 key cannot"},
		{"private key PEM", Config{Keys: []KeyConfig{{Algorithm: "ES256", PEM: privPEM}}}, "not a public key"},
		{"not PEM", Config{Keys: []KeyConfig{{Algorithm: "ES256", PEM: "hello"}}}, "no PEM block"},
		{"two sources", Config{Keys: []KeyConfig{{Algorithm: "HS256", Secret: secret1, PEM: "x"}}}, "exactly one"},
		{"missing pem_file", Config{Keys: []KeyConfig{{Algorithm: "ES256", PEMFile: filepath.Join(dir, "nope")}}}, "pem_file"},
		{"missing jwks_file", Config{JWKSFile: filepath.Join(dir, "nope.json")}, "jwks_file"},
		{"jwks oct without alg", Config{JWKSFile: write("oct.json", `{"keys":[{"kty":"oct","k":"`+b64u([]byte(secret1))+`"}]}`)}, "must name its alg"},
		{"jwks empty", Config{JWKSFile: write("empty.json", `{"keys":[]}`)}, "no signature keys"},
		{"jwks bad point", Config{JWKSFile: write("bad.json", `{"keys":[{"kty":"EC","crv":"P-256","x":"`+b64u(make([]byte, 32))+`","y":"`+b64u(make([]byte, 32))+`"}]}`)}, "EC point"},
		{"jwks not json", Config{JWKSFile: write("garbage.json", `{`)}, "parse JWKS"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestSecretFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(secret1+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	v, err := New(Config{Keys: []KeyConfig{{Algorithm: "HS256", SecretFile: p}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(sign(t, jwt.SigningMethodHS256, "", []byte(secret1), nil), now); err != nil {
		t.Fatalf("Verify: %v", err)
	}
}
