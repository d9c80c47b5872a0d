// Package router holds the model router's integration tests: the real
// comfygate binary (tests/gateway) in front of protocol-faithful partner
// peers (tests/peers/partner), on the embedded store and on Postgres+Redis.
package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/internal/router/limits"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/embedded"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/tests/gateway"
)

// jwtSecret signs every test token (HS256 needs at least 32 bytes).
const jwtSecret = "router-integration-test-secret-0123456789"

// backend is one storage configuration.
type backend struct {
	name string
	// global returns the comfygate global option body and the Redis key
	// prefix the router's limiter uses ("" on embedded).
	global func(t *testing.T) (body, prefix, dsn string)
}

func embeddedBackend() backend {
	return backend{name: "embedded", global: func(t *testing.T) (string, string, string) {
		return "storage embedded ./data", "", ""
	}}
}

func postgresBackend() backend {
	return backend{name: "postgres", global: func(t *testing.T) (string, string, string) {
		dsn := pgtest.DSN(t)
		return fmt.Sprintf("storage postgres %q\n\t\tredis %q", dsn, pgtest.RedisURL(t)), pgtest.KeyPrefix(t), dsn
	}}
}

func backends() []backend { return []backend{embeddedBackend(), postgresBackend()} }

// model is one catalog entry for a test catalog.
type model struct {
	ID, Adapter, Upstream string
	Credential            string
	CredentialHeader      map[string]string
	Schema                string // inline OpenAPI document, "" for none
	Price                 int64
	Deadline, Poll        string
	Entitlement           string
	Charges               string
}

func catalogJSON(t *testing.T, models []model) []byte {
	t.Helper()
	var list []map[string]any
	for _, m := range models {
		e := map[string]any{
			"id": m.ID, "adapter": m.Adapter, "upstream": m.Upstream, "price_cents": m.Price,
			"billing": map[string]any{"charges_on_policy_rejection": or(m.Charges, "no")},
		}
		if m.Credential != "" {
			e["credential"] = m.Credential
		}
		if m.CredentialHeader != nil {
			e["credential_header"] = m.CredentialHeader
		}
		if m.Schema != "" {
			e["input_schema"] = json.RawMessage(m.Schema)
		}
		if m.Deadline != "" {
			e["deadline"] = m.Deadline
		}
		if m.Poll != "" {
			e["poll_interval"] = m.Poll
		}
		if m.Entitlement != "" {
			e["entitlement"] = m.Entitlement
		}
		list = append(list, e)
	}
	b, err := json.MarshalIndent(map[string]any{"models": list}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// routerGateway is a running gateway with its config.
type routerGateway struct {
	*gateway.Gateway
	prefix      string // limiter Redis prefix, "" on embedded
	dsn         string // Postgres DSN, "" on embedded
	catalogPath string
	adminPort   int
	global      string
	options     string
	backend     string
}

// startRouter writes the catalog and runs a gateway with model_router
// options (lines inside the model_router block).
func startRouter(t *testing.T, b backend, models []model, options string) *routerGateway {
	t.Helper()
	dir := t.TempDir()
	global, prefix, dsn := b.global(t)
	g := &routerGateway{prefix: prefix, dsn: dsn, catalogPath: filepath.Join(dir, "catalog.json"),
		adminPort: gateway.FreePort(t), global: global, options: options, backend: b.name}
	if err := os.WriteFile(g.catalogPath, catalogJSON(t, models), 0o600); err != nil {
		t.Fatal(err)
	}
	// A port may be reused by this gateway after an earlier one stopped:
	// drop kept-alive connections so no request lands on a dead one.
	client.CloseIdleConnections()
	g.Gateway = gateway.Start(t, g.caddyfile(), gateway.Options{Dir: dir})
	return g
}

func (g *routerGateway) caddyfile() string {
	site := gateway.RouterSite{Admin: "127.0.0.1:" + fmt.Sprint(g.adminPort), JWTSecret: jwtSecret,
		Catalog: g.catalogPath, Options: []string{g.options}}
	if g.prefix != "" {
		site.Options = append(site.Options, "redis_prefix "+g.prefix)
	}
	return gateway.RouterConfig(g.global, site)
}

// reload rewrites the catalog and loads the same Caddyfile again through
// the admin API, as `caddy reload` does.
func (g *routerGateway) reload(t *testing.T, models []model) {
	t.Helper()
	if err := os.WriteFile(g.catalogPath, catalogJSON(t, models), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := strings.ReplaceAll(g.caddyfile(), "{PORT}", fmt.Sprint(g.Port))
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/load", g.adminPort), strings.NewReader(cfg))
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate") // reload even though the Caddyfile is unchanged (caddy reload --force)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("reload: %d %s", resp.StatusCode, b)
	}
}

// limiter opens the Redis limiter the gateway uses (postgres backend only).
func (g *routerGateway) limiter(t *testing.T) limits.Limiter {
	t.Helper()
	l, err := limits.OpenRedis(pgtest.RedisURL(t), g.prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// routerStore opens the gateway's store to read usage records.
func (g *routerGateway) routerStore(t *testing.T) storage.RouterStore {
	t.Helper()
	if g.backend == "embedded" {
		s, err := embedded.Open(filepath.Join(g.Dir, "data"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	s, err := postgres.Open(context.Background(), g.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// ledger is the gateway's credit ledger, where require_credits draws from:
// the workspace of a call is the account of the same id.
type ledger struct{ st storage.Store }

// ledger opens the gateway's store for its credit ledger, migrated: the
// gateway opens and migrates its storage in the background, so its tables
// may not exist yet when it starts answering.
func (g *routerGateway) ledger(t *testing.T) ledger {
	t.Helper()
	st := g.routerStore(t).(storage.Store)
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	return ledger{st}
}

// AddCredits grants cents (one credit each) to ws and returns the balance.
func (l ledger) AddCredits(ctx context.Context, ws string, cents int64) (int64, error) {
	if _, err := l.st.GrantCredits(ctx, ws, cents, "test"); err != nil {
		return 0, err
	}
	return l.Balance(ctx, ws)
}

// Balance is ws's balance, which must be the sum of its ledger's entries.
func (l ledger) Balance(ctx context.Context, ws string) (int64, error) {
	bal, err := l.st.CreditBalance(ctx, ws)
	if err != nil {
		return 0, err
	}
	entries, err := l.st.CreditLedger(ctx, ws, time.Time{})
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, e := range entries {
		sum += e.Amount
	}
	if sum != bal {
		return 0, fmt.Errorf("balance %d, but the ledger's entries sum to %d", bal, sum)
	}
	return bal, nil
}

// claims builds a token's claims for workspace ws.
type claims struct {
	ws           string
	entitlements []string
	enabled      *bool
	expired      bool
}

func token(t testing.TB, c claims) string {
	t.Helper()
	mc := jwt.MapClaims{"workspace_id": c.ws, "exp": time.Now().Add(time.Hour).Unix()}
	if c.expired {
		mc["exp"] = time.Now().Add(-time.Hour).Unix()
	}
	if c.entitlements != nil {
		mc["entitlements"] = c.entitlements
	}
	if c.enabled != nil {
		mc["router_enabled"] = *c.enabled
	}
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, mc).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("status %d: body %q is not a JSON object: %v", r.Status, r.Body, err)
	}
	return m
}

// call sends a request and checks the headers every router response has.
func call(t testing.TB, method, url, tok string, body []byte, hdr map[string]string) response {
	t.Helper()
	r, err := send(context.Background(), method, url, tok, body, hdr)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	if r.Header.Get("X-Service-Request-Id") == "" {
		t.Errorf("%s %s: %d without X-Service-Request-Id", method, url, r.Status)
	}
	if r.Status >= 400 && r.Header.Get("X-Service-Error-Type") == "" {
		t.Errorf("%s %s: error %d without X-Service-Error-Type: %s", method, url, r.Status, r.Body)
	}
	// The same values under the public Comfy router's names, which the
	// official SDKs read.
	for _, name := range []string{"Request-Id", "Error-Type"} {
		if svc, comfy := r.Header.Get("X-Service-"+name), r.Header.Get("X-Comfy-"+name); svc != comfy {
			t.Errorf("%s %s: X-Service-%s %q but X-Comfy-%s %q", method, url, name, svc, name, comfy)
		}
	}
	return r
}

var client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}

func send(ctx context.Context, method, url, tok string, body []byte, hdr map[string]string) (response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return response{}, err
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}, err
}

// wantBucket checks status, bucket header and (except 422) the router body.
func wantBucket(t testing.TB, what string, r response, status int, bucket string) {
	t.Helper()
	if r.Status != status {
		t.Errorf("%s: status %d, want %d; body %s", what, r.Status, status, r.Body)
		return
	}
	if got := r.Header.Get("X-Service-Error-Type"); got != bucket {
		t.Errorf("%s: X-Service-Error-Type %q, want %q", what, got, bucket)
	}
	m := r.json(t)
	if status == http.StatusUnprocessableEntity {
		list, ok := m["detail"].([]any)
		if !ok || len(list) == 0 {
			t.Errorf("%s: 422 body %s has no detail list", what, r.Body)
		}
		if _, has := m["error_type"]; has {
			t.Errorf("%s: 422 body carries error_type: %s", what, r.Body)
		}
		return
	}
	if d, _ := m["detail"].(string); d == "" {
		t.Errorf("%s: body %s has no detail string", what, r.Body)
	}
	if m["error_type"] != bucket {
		t.Errorf("%s: body error_type %v, want %q", what, m["error_type"], bucket)
	}
}

// eventually polls cond until it holds or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func boolPtr(b bool) *bool { return &b }

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
