package browsersafe

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/comfygate/comfygate/tests/gateway"
)

// prompt is a ComfyUI /prompt body for the built-in executor.
const prompt = `{"prompt": {"1": {"class_type": "EmptyImage", "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0}},
	"2": {"class_type": "SaveImage", "inputs": {"filename_prefix": "p", "images": ["1", 0]}}}, "client_id": "c1"}`

// dialSocket opens /ws as a client sending h (Origin, Host, …) would and
// returns the handshake's status (101 when the socket opened).
func dialSocket(t *testing.T, url string, h headers) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := &websocket.DialOptions{HTTPHeader: http.Header{}}
	for k, v := range h {
		if k == "Host" {
			opts.Host = v
			continue
		}
		opts.HTTPHeader.Set(k, v)
	}
	c, resp, err := websocket.Dial(ctx, strings.Replace(url, "http://", "ws://", 1), opts)
	if err != nil {
		if resp == nil {
			t.Fatalf("dial %s: %v", url, err)
		}
		return resp.StatusCode
	}
	defer c.CloseNow()
	// The gateway speaks first: ComfyUI's status message.
	if _, msg, err := c.Read(ctx); err != nil || !strings.Contains(string(msg), `"status"`) {
		t.Errorf("socket %s: first message %q, %v", url, msg, err)
	}
	return http.StatusSwitchingProtocols
}

// comfyFront is the self-hosted example with the ComfyUI-compatible front
// beside the v2 API, and auth as its comfy_auth line ("" for the
// example's).
func comfyFront(t *testing.T, auth string) *gateway.Gateway {
	t.Helper()
	cfg := strings.Replace(selfHosted(t, auth), "\t\tcomfy_jobs\n", "\t\tcomfy_jobs\n\t\tcomfy_native\n", 1)
	return gateway.Start(t, cfg, gateway.Options{})
}

// TestComfyUIFrontWithoutAuth: the ComfyUI-compatible front on a site
// without authentication refuses what a page of another site, or a
// rebound one, makes the browser send — /prompt (and /api/prompt) as
// text/plain, an upload, /queue, /interrupt, /history, the socket — and
// serves ComfyUI clients (no Origin) and the site's own page.
func TestComfyUIFrontWithoutAuth(t *testing.T) {
	t.Parallel()
	g := comfyFront(t, "")
	plain := headers{"Content-Type": "text/plain"}
	asJSON := headers{"Content-Type": "application/json"}
	upload, ct := assetForm(t, "not an image", "x.png")

	for _, c := range []struct {
		what, method, path, body string
		h                        headers
	}{
		{"cross-site /prompt", http.MethodPost, "/prompt", prompt, crossSite.with(plain)},
		{"cross-site /api/prompt", http.MethodPost, "/api/prompt", prompt, crossSite.with(plain)},
		{"older browser /prompt", http.MethodPost, "/prompt", prompt, oldBrowser.with(plain)},
		{"Origin: null /prompt", http.MethodPost, "/prompt", prompt, nullOrigin.with(plain)},
		{"Sec-Fetch-Site /prompt", http.MethodPost, "/prompt", prompt, siteOnly.with(plain)},
		{"cross-site upload", http.MethodPost, "/upload/image", string(upload), crossSite.with(headers{"Content-Type": ct})},
		{"cross-site clear queue", http.MethodPost, "/queue", `{"clear": true}`, crossSite.with(plain)},
		{"cross-site interrupt", http.MethodPost, "/interrupt", "", crossSite},
		{"cross-site clear history", http.MethodPost, "/history", `{"clear": true}`, oldBrowser.with(plain)},
		{"rebound /prompt", http.MethodPost, "/prompt", prompt, rebound(g.Port).with(plain)},
		{"rebound /history", http.MethodGet, "/history", "", rebound(g.Port)},
		{"rebound /view", http.MethodGet, "/view?filename=p_00001_.png", "", rebound(g.Port)},
	} {
		forbidden(t, c.what, send(t, c.method, g.URL+c.path, []byte(c.body), c.h))
	}
	for what, h := range map[string]headers{
		"cross-site socket":          crossSite.with(headers{"Sec-Fetch-Mode": "websocket"}),
		"older browser's socket":     oldBrowser,
		"rebound socket":             rebound(g.Port).with(headers{"Sec-Fetch-Mode": "websocket"}),
		"another localhost's socket": {"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site"},
	} {
		if st := dialSocket(t, g.URL+"/ws?clientId=evil", h); st != http.StatusForbidden {
			t.Errorf("%s: handshake %d, want 403", what, st)
		}
	}

	// ComfyUI clients (no Origin) and the site's own page.
	status(t, "client /prompt", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), asJSON), http.StatusOK)
	status(t, "client /prompt at localhost", send(t, http.MethodPost, fmt.Sprintf("http://localhost:%d/prompt", g.Port), []byte(prompt), asJSON), http.StatusOK)
	status(t, "own page /prompt", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), asJSON.with(sameOrigin(g.URL))), http.StatusOK)
	status(t, "client /interrupt", send(t, http.MethodPost, g.URL+"/interrupt", nil, nil), http.StatusOK)
	for what, h := range map[string]headers{
		"client socket (no Origin)": nil,
		"own page's socket":         sameOrigin(g.URL).with(headers{"Sec-Fetch-Mode": "websocket"}),
	} {
		if st := dialSocket(t, g.URL+"/ws?clientId=ok", h); st != http.StatusSwitchingProtocols {
			t.Errorf("%s: handshake %d, want 101", what, st)
		}
	}
}

// TestComfyUIFrontAllowedOrigin: an allowed origin's page may call the
// ComfyUI front, preflight and socket included.
func TestComfyUIFrontAllowedOrigin(t *testing.T) {
	t.Parallel()
	const app = "http://app.test:3000"
	g := comfyFront(t, "comfy_auth none {\n\t\t\tallow_origin "+app+"\n\t\t}")
	asJSON := headers{"Content-Type": "application/json"}
	fromApp := headers{"Origin": app, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}
	a := send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), asJSON.with(fromApp))
	status(t, "allowed origin /prompt", a, http.StatusOK)
	if a.header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("allowed origin /prompt: Access-Control-Allow-Origin %q", a.header.Get("Access-Control-Allow-Origin"))
	}
	status(t, "allowed origin's preflight", send(t, http.MethodOptions, g.URL+"/prompt", nil,
		fromApp.with(headers{"Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"})), http.StatusNoContent)
	if st := dialSocket(t, g.URL+"/ws?clientId=ok", fromApp.with(headers{"Sec-Fetch-Mode": "websocket"})); st != http.StatusSwitchingProtocols {
		t.Errorf("allowed origin's socket: handshake %d, want 101", st)
	}
	forbidden(t, "another origin", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), crossSite.with(headers{"Content-Type": "text/plain"})))
}

// TestComfyUICompatibleExample: the comfyui-compatible example (API keys,
// also as ?token=) refuses a page of another site 403 before it looks at
// the key — with the key in the query, which a page could carry, too —
// and serves the clients that send the key.
func TestComfyUICompatibleExample(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, gateway.Example(t, "comfyui-compatible.Caddyfile"), gateway.Options{})
	key := gateway.CreateAPIKey(t, g, "browser-a")
	plain := headers{"Content-Type": "text/plain"}
	bearer := headers{"Authorization": "Bearer " + key, "Content-Type": "application/json"}

	forbidden(t, "cross-site /prompt without a key", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), crossSite.with(plain)))
	forbidden(t, "cross-site /prompt with the key in the query", send(t, http.MethodPost, g.URL+"/prompt?token="+key, []byte(prompt), crossSite.with(plain)))
	forbidden(t, "cross-site v2 submit with the key in the query", send(t, http.MethodPost, g.URL+"/api/v2/jobs?token="+key, tinyWorkflow("e"), crossSite.with(plain)))
	if st := dialSocket(t, g.URL+"/ws?clientId=evil&token="+key, crossSite); st != http.StatusForbidden {
		t.Errorf("cross-site socket with the key: handshake %d, want 403", st)
	}

	status(t, "client /prompt", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt), bearer), http.StatusOK)
	status(t, "client v2 submit", send(t, http.MethodPost, g.URL+"/api/v2/jobs", tinyWorkflow("ok"), bearer), http.StatusCreated)
	status(t, "client at another name (a key is needed, not a Host)", send(t, http.MethodPost, g.URL+"/prompt", []byte(prompt),
		bearer.with(headers{"Host": "comfy.example.com"})), http.StatusOK)
	if st := dialSocket(t, g.URL+"/ws?clientId=ok&token="+key, nil); st != http.StatusSwitchingProtocols {
		t.Errorf("client socket: handshake %d, want 101", st)
	}
}
