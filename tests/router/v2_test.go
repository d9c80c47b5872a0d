package router

import (
	"bytes"
	"net/http"
	"testing"
)

// TestV2Routes: the public Comfy router's /v2/models paths, which the
// official SDKs call, answer exactly as /v1/models does; the schema link
// stays under the prefix the caller used, and a passthrough answer is
// marked nosniff.
func TestV2Routes(t *testing.T) {
	p := startPeers(t)
	g := startRouter(t, embeddedBackend(), standardModels(p), "")
	tok := token(t, claims{ws: "ws-v2"})

	for _, v := range []string{"v1", "v2"} {
		base := g.URL + "/" + v + "/models"
		list := call(t, http.MethodGet, base+"?limit=2", tok, nil, nil)
		if list.Status != 200 || len(list.json(t)["data"].([]any)) != 2 {
			t.Errorf("%s list: %d %s", v, list.Status, list.Body)
		}
		detail := call(t, http.MethodGet, base+"/acme/image", tok, nil, nil)
		if want := "https://router.test/" + v + "/models/acme/image/openapi.json"; detail.Status != 200 ||
			detail.json(t)["input_schema_url"] != want {
			t.Errorf("%s detail: %d %s, want input_schema_url %s", v, detail.Status, detail.Body, want)
		}
		schema := call(t, http.MethodGet, base+"/acme/image/openapi.json", tok, nil, nil)
		if schema.Status != 200 || !bytes.Contains(schema.Body, []byte(`"openapi"`)) {
			t.Errorf("%s schema: %d %s", v, schema.Status, schema.Body)
		}
		run := call(t, http.MethodPost, base+"/acme/image", tok, prompt, nil)
		if run.Status != 200 || !bytes.Contains(run.Body, []byte(`"a red fox"`)) ||
			run.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s call: %d %v %s", v, run.Status, run.Header, run.Body)
		}
		missing := call(t, http.MethodPost, base+"/acme/imagee", tok, prompt, nil)
		wantBucket(t, v+" unknown model", missing, 404, "model_not_found")
	}
}
