package sdk

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestOfficialSDKModels runs the official SDK's comfy.models.run (which
// calls /v2/models/{provider}/{model} and reads X-Comfy-Request-Id and
// X-Comfy-Error-Type) against model_router with JWT auth, on the embedded
// store, in front of a synchronous JSON partner peer.
func TestOfficialSDKModels(t *testing.T) {
	requireSDK(t)
	peer := partner.NewSyncJSON(t)
	dir := t.TempDir()
	catalog, err := json.Marshal(map[string]any{"models": []map[string]any{{
		"id": "acme/image", "adapter": "http", "upstream": peer.URL + "/v1/images/generations",
		"credential": partner.DefaultSecret, "price_cents": 5, "deadline": "5s",
		"billing":      map[string]any{"charges_on_policy_rejection": "no"},
		"input_schema": json.RawMessage(modelSchema),
	}}})
	if err != nil {
		t.Fatal(err)
	}
	catalogPath := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(catalogPath, catalog, 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "sdk-router-test-secret-0123456789abcdef"
	cfg := gateway.RouterConfig("storage embedded ./data",
		gateway.RouterSite{JWTSecret: secret, Catalog: catalogPath, Options: []string{"max_in_flight 4"}})
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{
		"workspace_id": "ws-sdk", "exp": time.Now().Add(time.Hour).Unix(),
	}).SignedString([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}

	runNodeTests(t, []string{"COMFY_ROUTER_BASE_URL=" + g.URL, "COMFY_API_KEY=" + tok}, filepath.Join("router", "models.test.mjs"))
	// Two answered calls reach the partner: the first test's and the first
	// of the same-key pair; the refusals and the replay never do.
	if n := peer.Submissions(); n != 2 {
		t.Fatalf("the partner saw %d submissions, want 2", n)
	}
}

// modelSchema is acme/image's OpenAPI input document: a non-empty prompt.
const modelSchema = `{"openapi":"3.1.0","info":{"title":"acme/image","version":"1"},
"paths":{"/":{"post":{"requestBody":{"required":true,"content":{"application/json":{"schema":{"$ref":"#/components/schemas/In"}}}},
"responses":{"200":{"description":"ok"}}}}},
"components":{"schemas":{"In":{"type":"object","required":["prompt"],
"properties":{"prompt":{"type":"string","minLength":1},"seed":{"type":"integer"}}}}}}`
