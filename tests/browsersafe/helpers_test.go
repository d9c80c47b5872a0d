package browsersafe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

// evil is the origin of a page of another site.
const evil = "https://evil.example"

// headers is a request's headers; "Host" sets the request's Host.
type headers map[string]string

// with returns h and more, more winning.
func (h headers) with(more headers) headers {
	out := headers{}
	for k, v := range h {
		out[k] = v
	}
	for k, v := range more {
		out[k] = v
	}
	return out
}

// What browsers send with a page's request to another site: a current
// browser (Sec-Fetch-*), an older one (Origin alone), a sandboxed frame
// or a file: page (Origin: null), and a request whose Origin a browser
// left off but whose Sec-Fetch-Site says where it comes from.
var (
	crossSite  = headers{"Origin": evil, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors", "Sec-Fetch-Dest": "empty"}
	oldBrowser = headers{"Origin": evil}
	nullOrigin = headers{"Origin": "null", "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "no-cors"}
	siteOnly   = headers{"Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "navigate"}
)

// rebound is what a page of evil.example sends once its name resolves to
// the gateway's address: same-origin to the browser, its own name in Host.
func rebound(port int) headers {
	return headers{"Host": fmt.Sprintf("evil.example:%d", port), "Origin": fmt.Sprintf("http://evil.example:%d", port),
		"Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
}

// sameOrigin is what a page of the site itself sends.
func sameOrigin(site string) headers {
	return headers{"Origin": site, "Sec-Fetch-Site": "same-origin", "Sec-Fetch-Mode": "cors"}
}

// answer is a whole response.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// send sends one request with h and reads the whole answer.
func send(t testing.TB, method, url string, body []byte, h headers) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}
}

// short is at most 300 bytes of b, for messages.
func short(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// forbidden checks a 403 in the v2 envelope: {"error": {"code": "forbidden", …}}.
func forbidden(t testing.TB, what string, a answer) {
	t.Helper()
	var env struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if a.status != http.StatusForbidden || json.Unmarshal(a.body, &env) != nil || env.Error.Code != "forbidden" || env.Error.Message == "" {
		t.Errorf("%s: %d %s, want 403 forbidden in the v2 envelope", what, a.status, short(a.body))
	}
	if a.header.Get("X-Request-Id") == "" {
		t.Errorf("%s: a refusal without X-Request-Id", what)
	}
	if a.header.Get("Access-Control-Allow-Origin") != "" {
		t.Errorf("%s: a refusal carries Access-Control-Allow-Origin %q", what, a.header.Get("Access-Control-Allow-Origin"))
	}
}

// status checks an answer's status.
func status(t testing.TB, what string, a answer, want int) {
	t.Helper()
	if a.status != want {
		t.Errorf("%s: %d %s, want %d", what, a.status, short(a.body), want)
	}
}

// tinyWorkflow is a quick job on the built-in executor, as a submit body.
func tinyWorkflow(prefix string) []byte {
	b, _ := json.Marshal(map[string]any{"workflow": map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": prefix, "images": []any{"1", 0}}),
	}})
	return b
}

// assetForm is a multipart upload of data as a text/plain asset, and the
// form's content type.
func assetForm(t testing.TB, data, name string) ([]byte, string) {
	t.Helper()
	return assetFormOf(t, data, name, "text/plain")
}

// assetFormOf is assetForm for an asset of contentType.
func assetFormOf(t testing.TB, data, name, contentType string) ([]byte, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for k, v := range map[string]string{"content_type": contentType, "file_path": name} {
		if err := w.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	fw, err := w.CreateFormFile("file", name)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(fw, data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w.FormDataContentType()
}

// jobCount is how many jobs the site's (only) account has.
func jobCount(t testing.TB, base string, h headers) int {
	t.Helper()
	a := send(t, http.MethodGet, base+"/api/v2/jobs?limit=100", nil, h)
	var list struct {
		Jobs []any `json:"jobs"`
	}
	if a.status != http.StatusOK || json.Unmarshal(a.body, &list) != nil {
		t.Fatalf("list jobs: %d %s", a.status, short(a.body))
	}
	return len(list.Jobs)
}

// selfHosted is the self-hosted example as a user runs it (see
// gateway.SelfHostedExample), with its comfy_auth line replaced by auth
// when auth is not empty.
func selfHosted(t testing.TB, auth string) string {
	t.Helper()
	cfg := gateway.SelfHostedExample(t)
	if auth == "" {
		return cfg
	}
	if !strings.Contains(cfg, "\t\tcomfy_auth none\n") {
		t.Fatal("the self-hosted example no longer has the line comfy_auth none")
	}
	return strings.Replace(cfg, "\t\tcomfy_auth none\n", "\t\t"+auth+"\n", 1)
}
