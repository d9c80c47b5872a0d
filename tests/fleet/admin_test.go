package fleet

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestAdminAPI holds admin.api.comfygate_workers to its routes: the
// listing of every pool, free, and the refusals (unknown pool or worker, a
// bad URL, a wrong method).
func TestAdminAPI(t *testing.T) {
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	admin := "http://" + adminAddr
	gateway.Start(t, gateway.V2Config(`storage embedded ./data
		pool gpu comfyui {
			worker `+peer.URL+`
		}`, gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(method, admin+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	waitFor(t, "the worker healthy", func() bool { return adminWorkers(t, admin)[peer.URL].Healthy })

	st, all := call(http.MethodGet, "/comfygate/workers/", "")
	pools, _ := all["pools"].(map[string]any)
	if gpu, _ := pools["gpu"].([]any); st != 200 || len(gpu) != 1 {
		t.Fatalf("GET all = %d %v", st, all)
	}
	if st, _ := call(http.MethodPost, "/comfygate/workers/gpu/free?url="+url.QueryEscape(peer.URL), ""); st != 200 || peer.Stats().Frees != 1 {
		t.Fatalf("free = %d, peer frees %d", st, peer.Stats().Frees)
	}
	for _, c := range []struct {
		method, path, body string
		want               int
	}{
		{http.MethodGet, "/comfygate/workers/nope", "", 404},
		{http.MethodPost, "/comfygate/workers/gpu", `{"url": "ftp://x"}`, 400},
		{http.MethodPost, "/comfygate/workers/gpu", `{"url": `, 400},
		{http.MethodDelete, "/comfygate/workers/gpu?url=http://127.0.0.1:1", "", 404},
		{http.MethodPost, "/comfygate/workers/gpu/free?url=http://127.0.0.1:1", "", 404},
		{http.MethodPut, "/comfygate/workers/gpu", "", 405},
		{http.MethodGet, "/comfygate/workers/gpu/other", "", 404},
	} {
		if st, body := call(c.method, c.path, c.body); st != c.want {
			t.Errorf("%s %s = %d %v, want %d", c.method, c.path, st, body, c.want)
		}
	}
	if ws := adminWorkers(t, admin); len(ws) != 1 || !ws[peer.URL].Healthy {
		t.Fatalf("the refused calls changed the pool: %v", ws)
	}
}
