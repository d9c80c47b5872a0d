package browsersafe

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/comfygate/comfygate/tests/browser"
	"github.com/comfygate/comfygate/tests/gateway"
)

// page serves html at / on 127.0.0.1: a web page of another site, once
// the browser resolves its name there.
func page(t *testing.T, html string) (port int) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, html)
	}))
	t.Cleanup(srv.Close)
	_, p, _ := net.SplitHostPort(srv.Listener.Addr().String())
	fmt.Sscan(p, &port)
	return port
}

// statuses records the status of every response the browser gets from
// the gateway on port, opaque ones included (a page cannot read those;
// the DevTools protocol can).
type statuses struct {
	mu  sync.Mutex
	got map[string][]int64 // "METHOD path" → statuses
}

func watch(t *testing.T, ctx context.Context, port int) *statuses {
	t.Helper()
	s := &statuses{got: map[string][]int64{}}
	methods := sync.Map{}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *network.EventRequestWillBeSent:
			methods.Store(e.RequestID, e.Request.Method)
		case *network.EventResponseReceived:
			if !strings.Contains(e.Response.URL, fmt.Sprintf(":%d/", port)) {
				return
			}
			m, _ := methods.Load(e.RequestID)
			path := e.Response.URL[strings.Index(e.Response.URL, fmt.Sprintf(":%d/", port))+len(fmt.Sprintf(":%d", port)):]
			s.mu.Lock()
			s.got[fmt.Sprint(m, " ", path)] = append(s.got[fmt.Sprint(m, " ", path)], e.Response.Status)
			s.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *statuses) of(key string) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int64(nil), s.got[key]...)
}

// evalAsync runs an async script returning JSON and decodes it into out.
func evalAsync(t *testing.T, ctx context.Context, script string, out any) {
	t.Helper()
	wait, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	raw, err := chromedp.Run(wait, chromedp.Evaluate[string](script, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("evaluate: %v\n%s", err, script)
	}
	if err := json.Unmarshal([]byte(raw), out); err != nil {
		t.Fatalf("script answered %q: %v", raw, err)
	}
}

// attackScript sends, from the page, the writes a page of another site
// can send without a preflight (no-cors: the page never reads the
// answers), then tries to read the job list with a CORS request.
const attackScript = `(async () => {
	const target = %q;
	const wf = %q;
	const out = {};
	const send = async (name, path, init) => {
		try { await fetch(target + path, Object.assign({mode: "no-cors"}, init)); out[name] = "sent"; }
		catch (e) { out[name] = "error: " + e; }
	};
	await send("text", "/api/v2/jobs", {method: "POST", headers: {"Content-Type": "text/plain"}, body: wf});
	await send("form", "/api/v2/jobs", {method: "POST", headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: wf});
	const fd = new FormData();
	fd.append("content_type", "text/plain");
	fd.append("file_path", "evil.txt");
	fd.append("file", new Blob(["bytes from a page of another site"]), "evil.txt");
	await send("multipart", "/api/v2/assets", {method: "POST", body: fd});
	try { await (await fetch(target + "/api/v2/jobs")).json(); out.read = "read"; }
	catch (e) { out.read = "blocked"; }
	return JSON.stringify(out);
})()`

// TestBrowserCrossSitePage: headless Chromium on a page of another site
// (evil.test) sends text/plain, form and multipart writes to the
// self-hosted example; the gateway answers each 403 and nothing is
// created; the page cannot read the job list.
func TestBrowserCrossSitePage(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, selfHosted(t, ""), gateway.Options{})
	evilPort := page(t, "<!doctype html><title>evil</title>")
	ctx := browser.New(t, browser.Options{Resolve: map[string]string{"evil.test": "127.0.0.1"}})
	seen := watch(t, ctx, g.Port)
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("http://evil.test:%d/", evilPort))); err != nil {
		t.Fatal(err)
	}
	var out map[string]string
	evalAsync(t, ctx, fmt.Sprintf(attackScript, g.URL, string(tinyWorkflow("evil"))), &out)
	t.Logf("page: %v", out)
	if out["read"] != "blocked" {
		t.Errorf("the page read the job list: %v", out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(seen.of("POST /api/v2/jobs")) < 2 || len(seen.of("POST /api/v2/assets")) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the browser's requests did not all arrive: %v", seen.got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, key := range []string{"POST /api/v2/jobs", "POST /api/v2/assets"} {
		for _, st := range seen.of(key) {
			if st != http.StatusForbidden {
				t.Errorf("%s from a page of another site: %d, want 403", key, st)
			}
		}
	}
	if n := jobCount(t, g.URL, nil); n != 0 {
		t.Errorf("the page created %d jobs", n)
	}
}

// reboundScript is what a page does once its own name points at the
// gateway: same-origin requests, whose answers it may read.
const reboundScript = `(async () => {
	const wf = %q;
	const submit = await fetch("/api/v2/jobs", {method: "POST", headers: {"Content-Type": "application/json"}, body: wf});
	const list = await fetch("/api/v2/jobs");
	return JSON.stringify({submit: submit.status, submitBody: await submit.json(), list: list.status});
})()`

type pageAnswers struct {
	Submit     int `json:"submit"`
	SubmitBody struct {
		ID    string `json:"id"`
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	} `json:"submitBody"`
	List int `json:"list"`
}

// TestBrowserRebinding: a page whose name (evil.test) resolves to the
// gateway's address — DNS rebinding — submits and lists jobs
// same-origin; with no authentication the gateway answers 403
// forbidden, which no Origin check could; the site's own pages, at
// 127.0.0.1 and at localhost, submit and list.
func TestBrowserRebinding(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, selfHosted(t, ""), gateway.Options{})
	ctx := browser.New(t, browser.Options{Resolve: map[string]string{"evil.test": "127.0.0.1"}})
	run := func(origin string) pageAnswers {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/api/v2/jobs?limit=1")); err != nil {
			t.Fatal(err)
		}
		var a pageAnswers
		evalAsync(t, ctx, fmt.Sprintf(reboundScript, string(tinyWorkflow("page"))), &a)
		return a
	}
	if a := run(fmt.Sprintf("http://evil.test:%d", g.Port)); a.Submit != http.StatusForbidden || a.SubmitBody.Error.Code != "forbidden" || a.List != http.StatusForbidden {
		t.Errorf("rebound page: %+v, want 403 forbidden for both", a)
	}
	if n := jobCount(t, g.URL, nil); n != 0 {
		t.Fatalf("the rebound page created %d jobs", n)
	}
	for _, origin := range []string{g.URL, fmt.Sprintf("http://localhost:%d", g.Port)} {
		if a := run(origin); a.Submit != http.StatusCreated || a.SubmitBody.ID == "" || a.List != http.StatusOK {
			t.Errorf("the site's own page at %s: %+v, want 201 and 200", origin, a)
		}
	}
}

// corsScript calls the gateway from an allowed origin's page with a
// request that needs a preflight (JSON, an Idempotency-Key) and reads
// the answer.
const corsScript = `(async () => {
	try {
		const r = await fetch(%q + "/api/v2/jobs", {method: "POST",
			headers: {"Content-Type": "application/json", "Idempotency-Key": %q}, body: %q});
		return JSON.stringify({status: r.status, id: (await r.json()).id || "", requestId: r.headers.get("X-Request-Id") || ""});
	} catch (e) { return JSON.stringify({error: String(e)}); }
})()`

// TestBrowserAllowedOrigin: with allow_origin, that origin's page calls
// the gateway with CORS — preflight, submit, reading the answer and its
// headers — while another site's page is stopped at the preflight.
func TestBrowserAllowedOrigin(t *testing.T) {
	t.Parallel()
	appPort := page(t, "<!doctype html><title>app</title>")
	evilPort := page(t, "<!doctype html><title>evil</title>")
	app := fmt.Sprintf("http://app.test:%d", appPort)
	g := gateway.Start(t, selfHosted(t, "comfy_auth none {\n\t\t\tallow_origin "+app+"\n\t\t}"), gateway.Options{})
	ctx := browser.New(t, browser.Options{Resolve: map[string]string{"app.test": "127.0.0.1", "evil.test": "127.0.0.1"}})
	seen := watch(t, ctx, g.Port)
	type result struct {
		Status    int    `json:"status"`
		ID        string `json:"id"`
		RequestID string `json:"requestId"`
		Error     string `json:"error"`
	}
	call := func(origin, key string) result {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(origin+"/")); err != nil {
			t.Fatal(err)
		}
		var r result
		evalAsync(t, ctx, fmt.Sprintf(corsScript, g.URL, key, string(tinyWorkflow("cors"))), &r)
		return r
	}
	if r := call(app, "k-app"); r.Status != http.StatusCreated || r.ID == "" || r.RequestID == "" {
		t.Errorf("allowed origin's page: %+v, want 201 with the job and X-Request-Id readable", r)
	}
	if r := call(fmt.Sprintf("http://evil.test:%d", evilPort), "k-evil"); r.Error == "" {
		t.Errorf("another site's page: %+v, want the browser to stop it", r)
	}
	if pre := seen.of("OPTIONS /api/v2/jobs"); len(pre) != 2 || pre[0] != http.StatusNoContent || pre[1] != http.StatusForbidden {
		t.Errorf("preflights answered %v, want [204 403]", pre)
	}
	if n := jobCount(t, g.URL, nil); n != 1 {
		t.Errorf("%d jobs, want the allowed page's one", n)
	}
}

// uploadedScript is what an uploaded page or SVG runs when the browser
// lets it: it submits a job same-origin (the gateway's own origin, so no
// browser rule stops it) and marks the document.
const uploadedScript = `fetch("/api/v2/jobs", {method: "POST", headers: {"Content-Type": "application/json"}, body: %q})
	.then(r => { document.title = "ran " + r.status; });`

// TestBrowserUploadedPage: an HTML page and an SVG uploaded as assets,
// opened in headless Chromium from the gateway's own origin (their content
// URLs, as a link to them would), run no script: the gateway serves asset
// bytes in a sandbox (Content-Security-Policy). Before, both ran and
// created a job through the API as the visitor (stored XSS).
func TestBrowserUploadedPage(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, selfHosted(t, ""), gateway.Options{})
	script := fmt.Sprintf(uploadedScript, string(tinyWorkflow("xss")))
	docs := []struct{ name, contentType, body string }{
		{"page.html", "text/html", "<!doctype html><title>page</title><script>" + script + "</script>"},
		{"image.svg", "image/svg+xml", `<svg xmlns="http://www.w3.org/2000/svg"><script>` + script + `</script></svg>`},
	}
	ctx := browser.New(t, browser.Options{})
	for _, d := range docs {
		body, ct := assetFormOf(t, d.body, d.name, d.contentType)
		a := send(t, http.MethodPost, g.URL+"/api/v2/assets", body, headers{"Content-Type": ct})
		var asset struct {
			ID string `json:"id"`
		}
		if a.status != http.StatusCreated || json.Unmarshal(a.body, &asset) != nil {
			t.Fatalf("upload %s: %d %s", d.name, a.status, short(a.body))
		}
		content := g.URL + "/api/v2/assets/" + asset.ID + "/content"
		if csp := send(t, http.MethodGet, content, nil, nil).header.Get("Content-Security-Policy"); !strings.Contains(csp, "sandbox") {
			t.Errorf("%s: Content-Security-Policy %q, want a sandbox", d.name, csp)
		}
		if err := chromedp.Do(ctx, chromedp.Navigate(content)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // time for a script to run, were it allowed to
		title, err := chromedp.Run(ctx, chromedp.Title())
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(title, "ran") {
			t.Errorf("%s ran its script: title %q", d.name, title)
		}
	}
	if n := jobCount(t, g.URL, nil); n != 0 {
		t.Errorf("uploaded documents created %d jobs through the API", n)
	}
}
