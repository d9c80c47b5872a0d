package browsersafe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

const consoleToken = "a-console-token-for-the-browser-tests"

// TestConsole: the console reads only, and a page of another site's
// write is refused 403 in the envelope (not served, not 405) by the same
// rule; the console's own page and its API, read with the token, work.
func TestConsole(t *testing.T) {
	t.Parallel()
	site := "http://:{PORT} {\n\tbind 127.0.0.1\n\thandle_path /console/* {\n\t\terror_envelope\n\t\tcomfy_console {\n\t\t\ttoken " +
		consoleToken + "\n\t\t}\n\t}\n"
	cfg := strings.Replace(gateway.SelfHostedExample(t), "http://:{PORT} {\n\tbind 127.0.0.1\n", site, 1)
	if cfg == gateway.SelfHostedExample(t) {
		t.Fatal("the self-hosted example no longer starts its site as expected")
	}
	g := gateway.Start(t, cfg, gateway.Options{})
	bearer := headers{"Authorization": "Bearer " + consoleToken}
	forbidden(t, "cross-site write to the console API", send(t, http.MethodPost, g.URL+"/console/api/jobs", []byte("x"), bearer.with(crossSite)))
	forbidden(t, "cross-site write to the console page", send(t, http.MethodPost, g.URL+"/console/", []byte("x"), oldBrowser))
	status(t, "a write without a browser: the console reads only", send(t, http.MethodPost, g.URL+"/console/api/jobs", nil, bearer), http.StatusMethodNotAllowed)
	status(t, "the console page", send(t, http.MethodGet, g.URL+"/console/", nil, nil), http.StatusOK)
	status(t, "the console API, same origin", send(t, http.MethodGet, g.URL+"/console/api/jobs", nil, bearer.with(sameOrigin(g.URL))), http.StatusOK)
}

// TestWorkersAdminAPI: the workers admin API lives on Caddy's admin
// endpoint, whose own guard refuses a page of another site (Origin,
// Sec-Fetch-Mode no-cors) and a rebound Host for a loopback address, so
// nothing a browser sends adds a worker — which would receive the jobs'
// workflows and inputs. curl adds one.
func TestWorkersAdminAPI(t *testing.T) {
	t.Parallel()
	peer, other := comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})
	port := gateway.FreePort(t)
	admin := fmt.Sprintf("http://127.0.0.1:%d", port)
	gateway.Start(t, gateway.V2Config("storage embedded ./data\n\t\tpool gpu comfyui {\n\t\t\tworker "+peer.URL+"\n\t\t}",
		gateway.V2Site{Pool: "gpu", Admin: fmt.Sprintf("127.0.0.1:%d", port)}), gateway.Options{})
	add := []byte(fmt.Sprintf(`{"url": %q}`, other.URL))
	asJSON := headers{"Content-Type": "application/json"}
	workers := func() int {
		t.Helper()
		a := send(t, http.MethodGet, admin+"/comfygate/workers/gpu", nil, nil)
		var list []any
		if err := json.Unmarshal(a.body, &list); err != nil {
			var obj map[string][]any
			if json.Unmarshal(a.body, &obj) != nil {
				t.Fatalf("workers: %d %s", a.status, short(a.body))
			}
			list = obj["workers"]
		}
		return len(list)
	}
	before := workers()
	for what, h := range map[string]headers{
		"cross-site add":       asJSON.with(crossSite),
		"older browser's add":  asJSON.with(oldBrowser),
		"Origin: null add":     asJSON.with(nullOrigin),
		"no-cors add":          {"Content-Type": "text/plain", "Sec-Fetch-Mode": "no-cors"},
		"rebound add":          asJSON.with(headers{"Host": fmt.Sprintf("evil.example:%d", port)}),
		"rebound add, no port": asJSON.with(headers{"Host": "evil.example"}),
	} {
		if a := send(t, http.MethodPost, admin+"/comfygate/workers/gpu", add, h); a.status < 400 {
			t.Errorf("%s: %d %s, want refused", what, a.status, short(a.body))
		}
	}
	if n := workers(); n != before {
		t.Fatalf("the refused calls changed the pool: %d workers, had %d", n, before)
	}
	status(t, "curl add", send(t, http.MethodPost, admin+"/comfygate/workers/gpu", add, asJSON), http.StatusOK)
	if n := workers(); n != before+1 {
		t.Errorf("%d workers after curl's add, want %d", n, before+1)
	}
}
