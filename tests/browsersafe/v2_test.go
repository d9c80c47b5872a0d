package browsersafe

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestSelfHostedRefusesBrowserWrites: the self-hosted example (no
// authentication, 127.0.0.1) refuses 403, in the v2 envelope, every write
// a page of another site can make a browser send without a preflight —
// text/plain and form submits, a multipart upload, Origin: null,
// Sec-Fetch-Site alone, cancel and delete — and everything a DNS-rebound
// page sends; none of them creates anything. curl, at 127.0.0.1 and at
// localhost, and the site's own pages keep working; cross-site reads stay
// as they were (the browser keeps their answers from the page).
func TestSelfHostedRefusesBrowserWrites(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, selfHosted(t, ""), gateway.Options{})
	localhost := fmt.Sprintf("http://localhost:%d", g.Port)
	jobs := g.URL + "/api/v2/jobs"
	plain, form := headers{"Content-Type": "text/plain"}, headers{"Content-Type": "application/x-www-form-urlencoded"}
	asJSON := headers{"Content-Type": "application/json"}

	// What curl and the SDKs send works: at 127.0.0.1 and at localhost.
	created := 0
	submit := func(what, url string, h headers) string {
		t.Helper()
		a := send(t, http.MethodPost, url, tinyWorkflow("ok"), h)
		status(t, what, a, http.StatusCreated)
		var job struct{ ID string }
		_ = json.Unmarshal(a.body, &job)
		created++
		return job.ID
	}
	id := submit("curl", jobs, asJSON)
	submit("curl at localhost", localhost+"/api/v2/jobs", asJSON)
	submit("curl with text/plain", jobs, plain)
	submit("the site's own page", jobs, asJSON.with(sameOrigin(g.URL)))
	submit("the site's own page at localhost", localhost+"/api/v2/jobs", asJSON.with(sameOrigin(localhost)))
	evilBytes := "bytes a page of another site tried to upload"
	body, ct := assetForm(t, "mine", "mine.txt")
	up := send(t, http.MethodPost, g.URL+"/api/v2/assets", body, headers{"Content-Type": ct})
	status(t, "curl upload", up, http.StatusCreated)
	var asset struct{ ID string }
	_ = json.Unmarshal(up.body, &asset)

	// What a page of another site makes the browser send is refused.
	for _, c := range []struct {
		what   string
		method string
		url    string
		body   []byte
		h      headers
	}{
		{"cross-site text/plain submit", http.MethodPost, jobs, tinyWorkflow("evil"), crossSite.with(plain)},
		{"cross-site form submit", http.MethodPost, jobs, tinyWorkflow("evil"), crossSite.with(form)},
		{"cross-site text/plain submit, older browser", http.MethodPost, jobs, tinyWorkflow("evil"), oldBrowser.with(plain)},
		{"Origin: null submit", http.MethodPost, jobs, tinyWorkflow("evil"), nullOrigin.with(plain)},
		{"Sec-Fetch-Site: cross-site submit", http.MethodPost, jobs, tinyWorkflow("evil"), siteOnly.with(form)},
		{"cross-site submit to localhost", http.MethodPost, localhost + "/api/v2/jobs", tinyWorkflow("evil"), crossSite.with(plain)},
		{"another port of localhost", http.MethodPost, localhost + "/api/v2/jobs", tinyWorkflow("evil"),
			headers{"Origin": "http://localhost:3000", "Sec-Fetch-Site": "same-site", "Content-Type": "text/plain"}},
		{"cross-site cancel", http.MethodPost, jobs + "/" + id + "/cancel", nil, crossSite},
		{"cross-site delete", http.MethodDelete, g.URL + "/api/v2/assets/" + asset.ID, nil, oldBrowser},
		{"rebound submit", http.MethodPost, jobs, tinyWorkflow("evil"), rebound(g.Port).with(plain)},
		{"rebound read", http.MethodGet, jobs, nil, rebound(g.Port)},
		{"rebound read of a job", http.MethodGet, jobs + "/" + id, nil, rebound(g.Port)},
		{"rebound Host alone", http.MethodGet, jobs, nil, headers{"Host": fmt.Sprintf("evil.example:%d", g.Port)}},
		{"foreign preflight", http.MethodOptions, jobs, nil,
			headers{"Origin": evil, "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type"}},
	} {
		forbidden(t, c.what, send(t, c.method, c.url, c.body, c.h))
	}
	for _, h := range []headers{crossSite, oldBrowser, nullOrigin, siteOnly} {
		body, ct := assetForm(t, evilBytes, "evil.txt")
		forbidden(t, fmt.Sprintf("multipart upload with %v", h), send(t, http.MethodPost, g.URL+"/api/v2/assets", body, h.with(headers{"Content-Type": ct})))
	}

	// None of them did anything: the jobs are the curl and same-origin
	// ones, the refused bytes are new to the account, the asset is there.
	if n := jobCount(t, g.URL, nil); n != created {
		t.Errorf("%d jobs, want the %d submitted without a foreign page", n, created)
	}
	body, ct = assetForm(t, evilBytes, "evil.txt")
	status(t, "the refused bytes, uploaded by curl, are new", send(t, http.MethodPost, g.URL+"/api/v2/assets", body, headers{"Content-Type": ct}), http.StatusCreated)
	status(t, "the asset a page tried to delete", send(t, http.MethodGet, g.URL+"/api/v2/assets/"+asset.ID, nil, nil), http.StatusOK)
	if j := send(t, http.MethodGet, jobs+"/"+id, nil, nil); j.status != http.StatusOK || jsonField(j.body, "status") == "canceled" {
		t.Errorf("the job a page tried to cancel: %d %s", j.status, short(j.body))
	}

	// Reads from another site are answered as before, with nothing that
	// would let the page read them.
	for _, h := range []headers{crossSite, oldBrowser} {
		a := send(t, http.MethodGet, jobs, nil, h)
		status(t, "cross-site read", a, http.StatusOK)
		if a.header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("cross-site read carries Access-Control-Allow-Origin %q", a.header.Get("Access-Control-Allow-Origin"))
		}
	}
}

// TestAllowedOrigin: an origin the operator allows gets its preflight
// answered (204, for the method and headers it asked) and its writes
// served with the headers that let its page read them, errors included;
// other origins stay refused, and the Host check stays on.
func TestAllowedOrigin(t *testing.T) {
	t.Parallel()
	const app = "http://app.test:3000"
	g := gateway.Start(t, selfHosted(t, "comfy_auth none {\n\t\t\tallow_origin "+app+"\n\t\t}"), gateway.Options{})
	jobs := g.URL + "/api/v2/jobs"
	fromApp := headers{"Origin": app, "Sec-Fetch-Site": "cross-site", "Sec-Fetch-Mode": "cors"}

	pre := send(t, http.MethodOptions, jobs, nil, fromApp.with(headers{"Access-Control-Request-Method": "POST",
		"Access-Control-Request-Headers": "content-type,idempotency-key"}))
	status(t, "allowed preflight", pre, http.StatusNoContent)
	if pre.header.Get("Access-Control-Allow-Origin") != app || pre.header.Get("Access-Control-Allow-Headers") != "content-type,idempotency-key" ||
		pre.header.Get("Access-Control-Allow-Methods") == "" {
		t.Errorf("allowed preflight headers: %v", pre.header)
	}

	a := send(t, http.MethodPost, jobs, tinyWorkflow("app"), fromApp.with(headers{"Content-Type": "application/json", "Idempotency-Key": "k1"}))
	status(t, "allowed origin's submit", a, http.StatusCreated)
	if a.header.Get("Access-Control-Allow-Origin") != app || a.header.Get("Access-Control-Expose-Headers") == "" {
		t.Errorf("allowed origin's submit headers: %v", a.header)
	}
	bad := send(t, http.MethodPost, jobs, []byte(`{"workflow": {}}`), fromApp.with(headers{"Content-Type": "application/json"}))
	if bad.status < 400 || bad.header.Get("Access-Control-Allow-Origin") != app {
		t.Errorf("allowed origin's refused submit: %d, Access-Control-Allow-Origin %q", bad.status, bad.header.Get("Access-Control-Allow-Origin"))
	}

	forbidden(t, "another origin", send(t, http.MethodPost, jobs, tinyWorkflow("evil"), crossSite.with(headers{"Content-Type": "text/plain"})))
	forbidden(t, "the allowed origin's https twin", send(t, http.MethodPost, jobs, tinyWorkflow("evil"),
		fromApp.with(headers{"Origin": "https://app.test:3000", "Content-Type": "text/plain"})))
	forbidden(t, "rebound, even from the allowed origin", send(t, http.MethodPost, jobs, tinyWorkflow("evil"),
		fromApp.with(headers{"Host": fmt.Sprintf("app.test:%d", g.Port), "Content-Type": "text/plain"})))
	if n := jobCount(t, g.URL, nil); n != 1 {
		t.Errorf("%d jobs, want the allowed origin's one", n)
	}
}

// TestAllowedHost: a name the operator allows passes the Host check of a
// site without authentication; others do not.
func TestAllowedHost(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, selfHosted(t, "comfy_auth none {\n\t\t\tallow_host gpu-box.lan\n\t\t}"), gateway.Options{})
	jobs := g.URL + "/api/v2/jobs"
	status(t, "the allowed name", send(t, http.MethodPost, jobs, tinyWorkflow("named"),
		headers{"Host": fmt.Sprintf("gpu-box.lan:%d", g.Port), "Content-Type": "application/json"}), http.StatusCreated)
	status(t, "the allowed name's own page", send(t, http.MethodPost, jobs, tinyWorkflow("named"),
		sameOrigin(fmt.Sprintf("http://gpu-box.lan:%d", g.Port)).with(headers{"Host": fmt.Sprintf("gpu-box.lan:%d", g.Port), "Content-Type": "application/json"})),
		http.StatusCreated)
	forbidden(t, "another name", send(t, http.MethodGet, jobs, nil, headers{"Host": fmt.Sprintf("other.lan:%d", g.Port)}))
}

// TestAuthenticatedSiteAnyHost: a site that authenticates every request
// does not check Host (a rebound page has no credential), but refuses
// cross-site writes before it looks at the credential.
func TestAuthenticatedSiteAnyHost(t *testing.T) {
	t.Parallel()
	const token = "a-static-token-for-the-test"
	g := gateway.Start(t, selfHosted(t, "comfy_auth static_token "+token), gateway.Options{})
	jobs := g.URL + "/api/v2/jobs"
	auth := headers{"Authorization": "Bearer " + token, "Content-Type": "application/json"}
	status(t, "any Host with the token", send(t, http.MethodPost, jobs, tinyWorkflow("t"), auth.with(headers{"Host": "api.example.com"})), http.StatusCreated)
	status(t, "no token", send(t, http.MethodPost, jobs, tinyWorkflow("t"), headers{"Content-Type": "application/json"}), http.StatusUnauthorized)
	forbidden(t, "cross-site, with the token", send(t, http.MethodPost, jobs, tinyWorkflow("t"), auth.with(crossSite)))
	forbidden(t, "cross-site, without", send(t, http.MethodPost, jobs, tinyWorkflow("t"), crossSite.with(headers{"Content-Type": "text/plain"})))
}

// jsonField is a top-level string field of a JSON object.
func jsonField(b []byte, name string) string {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	s, _ := m[name].(string)
	return s
}
