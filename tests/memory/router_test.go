package memory

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/internal/router/rehost"
	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

const jwtSecret = "memory-test-router-secret-0123456789abcdef"

// TestRouterResultBombs: partners answer every bomb as a result URL and as
// base64; the router copies each into an asset (bytes, never decoded) and
// answers its own URL, within 100 MiB of the gateway's idle RSS.
func TestRouterResultBombs(t *testing.T) {
	skipUnlessLinux(t)
	var current atomic.Pointer[[]byte]
	media := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(*current.Load())
	}))
	t.Cleanup(media.Close)
	warm := gateway.GradientPNG(t, 64)
	current.Store(&warm)
	byURL := partner.NewSyncJSON(t, partner.WithMediaURL(media.URL+"/result.png"))
	catalog := []map[string]any{
		{"id": "fal/url-result", "adapter": "http", "upstream": byURL.URL + "/fal-ai/flux", "credential": partner.DefaultSecret,
			"rehost": map[string]any{"urls": []string{"images[*].url"}}},
	}
	b64 := map[string]*partner.Peer{}
	for _, b := range append([]bomb{{name: "warm", build: func() []byte { return warm }}}, bombList...) {
		p := partner.NewSyncJSON(t, partner.WithBase64Data(b.build()))
		b64[b.name] = p
		catalog = append(catalog, map[string]any{"id": "openai/" + modelName(b.name), "adapter": "http",
			"upstream": p.URL + "/v1/images/generations", "credential": partner.DefaultSecret,
			"rehost": map[string]any{"base64": []string{"images[*].b64_json"}}})
	}
	raw, _ := json.Marshal(map[string]any{"models": catalog})
	catPath := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(catPath, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	g := gateway.Start(t, routerSite(catPath), gateway.Options{})
	p := process{t: t, pid: g.PID()}
	tok := routerToken(t)

	copyAll := func(t *testing.T, name string, data []byte) {
		current.Store(&data)
		for _, model := range []string{"fal/url-result", "openai/" + modelName(name)} {
			r := gateway.Do(t, http.MethodPost, g.URL+"/v1/models/"+model, strings.NewReader(`{"prompt":"a bomb"}`),
				map[string]string{"Authorization": "Bearer " + tok, "Content-Type": "application/json"})
			if r.Status != http.StatusOK || r.Header.Get(rehost.HeaderFailed) != "" {
				t.Fatalf("%s: %d %v %.300s", model, r.Status, r.Header, r.Body)
			}
			var ans struct {
				Images []struct {
					URL     string
					B64JSON string `json:"b64_json"`
				}
			}
			_ = json.Unmarshal(r.Body, &ans)
			copied := ""
			if len(ans.Images) == 1 {
				copied = ans.Images[0].URL + ans.Images[0].B64JSON
			}
			if !strings.Contains(copied, "/api/v2/assets/") {
				t.Fatalf("%s answered %.300q, not a copy's URL", model, copied)
			}
			content := gateway.Do(t, http.MethodGet, copied, nil, map[string]string{"Authorization": "Bearer " + tok})
			if content.Status != http.StatusOK || !bytes.Equal(content.Body, data) {
				t.Fatalf("the copy of %s: %d, %d bytes of %d", model, content.Status, len(content.Body), len(data))
			}
		}
	}
	copyAll(t, "warm", warm)
	idle := p.idle()
	t.Logf("idle RSS %d MiB", idle/mib)
	for _, b := range bombList {
		t.Run(b.name, func(t *testing.T) {
			p.t = t
			data := b.build()
			p.resetPeak()
			copyAll(t, b.name, data)
			peak := p.peak()
			t.Logf("%-31s %5.2f MB as a URL and as base64: peak RSS %4d MiB, %+4d MiB from idle", b.name, float64(len(data))/1e6, peak/mib, (peak-idle)/mib)
			if peak-idle > 100*mib {
				t.Errorf("copying %s took the gateway from %d MiB to %d MiB", b.name, idle/mib, peak/mib)
			}
		})
	}
}

func modelName(bomb string) string {
	return strings.NewReplacer("²", "", " ", "-").Replace(strings.ToLower(bomb))
}

// routerSite is the model router with result copies (from local
// addresses: the test's peers) and the asset API they are served from.
func routerSite(catalog string) string {
	auth := `comfy_auth jwt {
			key HS256 secret ` + jwtSecret + `
		}`
	return `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/*
	route @router {
		error_envelope router
		` + auth + `
		model_router {
			catalog ` + catalog + `
			allow_insecure_upstreams
			rehost_allow_private
		}
	}
	route /api/v2/* {
		error_envelope
		` + auth + `
		comfy_assets
		error "not found" 404
	}
}
`
}

func routerToken(t *testing.T) string {
	t.Helper()
	s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"workspace_id": "ws-memory",
		"exp": time.Now().Add(time.Hour).Unix()}).SignedString([]byte(jwtSecret))
	if err != nil {
		t.Fatal(err)
	}
	return s
}
