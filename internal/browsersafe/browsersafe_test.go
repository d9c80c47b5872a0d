package browsersafe

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
)

// req is a request as a client sends it: method, Host, and headers as
// name/value pairs.
func req(method, host string, header ...string) *http.Request {
	r := httptest.NewRequest(method, "/api/v2/jobs", nil)
	r.Host = host
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	return r
}

// TestCheck: what a browser sends on a page's behalf is refused when it
// crosses origins and changes state (or opens a socket); what an SDK or
// curl sends (neither Origin nor Sec-Fetch-Site), same-origin requests,
// reads and allowed origins pass. The Host check, for a site without
// authentication, refuses rebound names whatever the method.
func TestCheck(t *testing.T) {
	const site = "127.0.0.1:8189"
	open, err := New(Config{AllowOrigins: []string{"https://App.Example.com:443/"}})
	if err != nil {
		t.Fatal(err)
	}
	local, err := New(Config{CheckHost: true, AllowHosts: []string{"MyBox.lan"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		policy *Policy
		r      *http.Request
		refuse bool
	}{
		{"SDK or curl POST: no browser headers", open, req("POST", site), false},
		{"SDK POST with another Host", open, req("POST", "api.example.com"), false},
		{"same-origin POST (Origin is the site)", open, req("POST", site, "Origin", "http://127.0.0.1:8189", "Sec-Fetch-Site", "same-origin"), false},
		{"same-origin POST, old browser without Sec-Fetch-Site", open, req("POST", "localhost:8189", "Origin", "http://localhost:8189"), false},
		{"user-typed navigation", open, req("POST", site, "Sec-Fetch-Site", "none"), false},
		{"cross-site simple POST (text/plain)", open, req("POST", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "text/plain"), true},
		{"cross-site form POST, old browser", open, req("POST", site, "Origin", "https://evil.example", "Content-Type", "application/x-www-form-urlencoded"), true},
		{"cross-site multipart POST", open, req("POST", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Content-Type", "multipart/form-data; boundary=b"), true},
		{"Origin: null (sandboxed frame, file:)", open, req("POST", site, "Origin", "null"), true},
		{"Origin: null with Sec-Fetch-Site", open, req("POST", site, "Origin", "null", "Sec-Fetch-Site", "cross-site"), true},
		{"Sec-Fetch-Site cross-site without Origin", open, req("POST", site, "Sec-Fetch-Site", "cross-site"), true},
		{"another port of localhost is another origin", open, req("POST", "localhost:8189", "Origin", "http://localhost:3000", "Sec-Fetch-Site", "same-site"), true},
		{"another port of localhost, old browser", open, req("POST", "localhost:8189", "Origin", "http://localhost:3000"), true},
		{"rebound name on a loopback Host", open, req("POST", "localhost:8189", "Origin", "http://evil.example:8189"), true},
		{"IPv6 loopback", open, req("POST", "[::1]:8189", "Origin", "http://evil.example"), true},
		{"an Origin that is no URL", open, req("POST", site, "Origin", "::not a url"), true},
		{"cross-site DELETE", open, req("DELETE", site, "Origin", "https://evil.example"), true},
		{"cross-site PUT", open, req("PUT", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), true},
		{"cross-site PATCH", open, req("PATCH", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), true},
		{"a named site is guarded too", open, req("POST", "api.example.com", "Origin", "https://app2.example.com", "Sec-Fetch-Site", "same-site"), true},
		{"cross-site GET: the browser keeps its answer", open, req("GET", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"), false},
		{"cross-site HEAD", open, req("HEAD", site, "Sec-Fetch-Site", "cross-site"), false},
		{"cross-site preflight is a safe method", open, req("OPTIONS", site, "Origin", "https://evil.example"), false},
		{"cross-site WebSocket handshake", open, req("GET", site, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site", "Upgrade", "websocket", "Connection", "Upgrade"), true},
		{"cross-site WebSocket handshake, old browser", open, req("GET", site, "Origin", "https://evil.example", "Upgrade", "WebSocket"), true},
		{"same-origin WebSocket handshake", open, req("GET", site, "Origin", "http://127.0.0.1:8189", "Sec-Fetch-Site", "same-origin", "Upgrade", "websocket"), false},
		{"WebSocket handshake of a Node client (no Origin)", open, req("GET", site, "Upgrade", "websocket"), false},
		{"allowed origin, cross-site POST", open, req("POST", site, "Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site"), false},
		{"allowed origin, old browser", open, req("POST", site, "Origin", "https://app.example.com"), false},
		{"allowed origin, WebSocket", open, req("GET", site, "Origin", "https://app.example.com", "Upgrade", "websocket"), false},
		{"allowed origin's http twin", open, req("POST", site, "Origin", "http://app.example.com", "Sec-Fetch-Site", "cross-site"), true},
		{"zero policy refuses cross-site writes", &Policy{}, req("POST", site, "Origin", "https://evil.example"), true},

		{"Host check: IPv4 literal", local, req("POST", site), false},
		{"Host check: IPv4 literal without port", local, req("GET", "127.0.0.1"), false},
		{"Host check: LAN address", local, req("POST", "192.168.1.5:8189"), false},
		{"Host check: IPv6 literal", local, req("POST", "[::1]:8189"), false},
		{"Host check: IPv6 literal without port", local, req("GET", "[::1]"), false},
		{"Host check: localhost", local, req("POST", "localhost:8189"), false},
		{"Host check: LOCALHOST", local, req("GET", "LOCALHOST:8189"), false},
		{"Host check: an allowed name", local, req("POST", "mybox.LAN:8189"), false},
		{"Host check: no Host (HTTP/1.0)", local, req("GET", ""), false},
		{"Host check: rebound name, same-origin to the browser", local, req("POST", "evil.example:8189", "Origin", "http://evil.example:8189", "Sec-Fetch-Site", "same-origin", "Content-Type", "text/plain"), true},
		{"Host check: rebound name, GET reads too", local, req("GET", "evil.example:8189", "Sec-Fetch-Site", "same-origin"), true},
		{"Host check: rebound name without port", local, req("GET", "evil.example"), true},
		{"Host check: a subdomain of localhost", local, req("GET", "x.localhost:8189"), true},
		{"Host check: a subdomain of an allowed name", local, req("GET", "x.mybox.lan"), true},
		{"no Host check: any name", open, req("GET", "evil.example:8189"), false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.policy.Check(tc.r)
			if (err != nil) != tc.refuse {
				t.Fatalf("Check = %v, want refused %v", err, tc.refuse)
			}
			if err != nil {
				if e, ok := apierr.As(err); !ok || e.Status != http.StatusForbidden || e.Code != "forbidden" {
					t.Fatalf("refusal %v, want 403 forbidden", err)
				}
			}
			if tc.r.Method != "GET" && tc.r.Header.Get("Upgrade") != "" {
				t.Fatalf("Check changed the request's method to %s", tc.r.Method)
			}
		})
	}
}

// TestServeCORS: an allowed origin's preflight is answered here, with the
// method and headers it asked for; its answers carry the headers that let
// its page read them. Any other origin's preflight is refused, and its
// answers carry no CORS header.
func TestServeCORS(t *testing.T) {
	p, err := New(Config{AllowOrigins: []string{"https://app.example.com", "http://localhost:3000"}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		r           *http.Request
		handled     bool
		refuse      bool
		allowOrigin string
	}{
		{"allowed preflight", req("OPTIONS", "127.0.0.1:8189", "Origin", "https://app.example.com",
			"Access-Control-Request-Method", "POST", "Access-Control-Request-Headers", "authorization,content-type,idempotency-key"),
			true, false, "https://app.example.com"},
		{"allowed preflight of another port", req("OPTIONS", "localhost:8189", "Origin", "http://localhost:3000",
			"Access-Control-Request-Method", "DELETE"), true, false, "http://localhost:3000"},
		{"foreign preflight", req("OPTIONS", "127.0.0.1:8189", "Origin", "https://evil.example",
			"Access-Control-Request-Method", "POST"), false, true, ""},
		{"OPTIONS that is no preflight goes on", req("OPTIONS", "127.0.0.1:8189"), false, false, ""},
		{"allowed origin's write", req("POST", "127.0.0.1:8189", "Origin", "https://app.example.com", "Sec-Fetch-Site", "cross-site"),
			false, false, "https://app.example.com"},
		{"allowed origin's read", req("GET", "127.0.0.1:8189", "Origin", "https://app.example.com"),
			false, false, "https://app.example.com"},
		{"foreign read: no CORS header", req("GET", "127.0.0.1:8189", "Origin", "https://evil.example"), false, false, ""},
		{"foreign write", req("POST", "127.0.0.1:8189", "Origin", "https://evil.example"), false, true, ""},
		{"SDK: no CORS header", req("POST", "127.0.0.1:8189"), false, false, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			handled, err := p.Serve(w, tc.r)
			if handled != tc.handled || (err != nil) != tc.refuse {
				t.Fatalf("Serve = %v, %v; want handled %v, refused %v", handled, err, tc.handled, tc.refuse)
			}
			h := w.Result().Header
			if got := h.Get("Access-Control-Allow-Origin"); got != tc.allowOrigin {
				t.Errorf("Access-Control-Allow-Origin %q, want %q", got, tc.allowOrigin)
			}
			if vary := h.Values("Vary"); len(vary) == 0 || vary[0] != "Origin" {
				t.Errorf("Vary %q, want Origin first", vary)
			}
			if !tc.handled {
				if tc.allowOrigin != "" && h.Get("Access-Control-Expose-Headers") != "*" {
					t.Errorf("Access-Control-Expose-Headers %q, want *", h.Get("Access-Control-Expose-Headers"))
				}
				return
			}
			if w.Code != http.StatusNoContent {
				t.Errorf("preflight answered %d, want 204", w.Code)
			}
			if m := h.Get("Access-Control-Allow-Methods"); m == "" {
				t.Error("preflight without Access-Control-Allow-Methods")
			}
			if got, want := h.Get("Access-Control-Allow-Headers"), tc.r.Header.Get("Access-Control-Request-Headers"); got != want {
				t.Errorf("Access-Control-Allow-Headers %q, want %q", got, want)
			}
			if h.Get("Access-Control-Max-Age") == "" {
				t.Error("preflight without Access-Control-Max-Age")
			}
		})
	}

	// Without allowed origins nothing varies by Origin.
	w := httptest.NewRecorder()
	if _, err := (&Policy{}).Serve(w, req("GET", "127.0.0.1:8189", "Origin", "https://evil.example")); err != nil {
		t.Fatal(err)
	}
	if v := w.Result().Header.Values("Vary"); len(v) != 0 {
		t.Errorf("Vary %q without allowed origins", v)
	}
}

// TestNew: origins are scheme://host[:port] as a browser sends them
// (normalized); allowed hosts are bare names.
func TestNew(t *testing.T) {
	for _, tc := range []struct {
		origin, want string
	}{
		{"https://app.example.com", "https://app.example.com"},
		{"HTTPS://App.Example.COM/", "https://app.example.com"},
		{"https://app.example.com:443", "https://app.example.com"},
		{"http://app.example.com:80", "http://app.example.com"},
		{"http://localhost:3000", "http://localhost:3000"},
		{"https://[::1]:443", "https://[::1]"},
		{"https://[::1]:8443", "https://[::1]:8443"},
	} {
		got, err := NormalizeOrigin(tc.origin)
		if err != nil || got != tc.want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", tc.origin, got, err, tc.want)
		}
	}
	for _, bad := range []string{"app.example.com", "null", "*", "https://", "ftp://app.example.com",
		"https://app.example.com/path", "https://app.example.com?q", "https://app.example.com#f", "https://user@app.example.com", "://x"} {
		if _, err := New(Config{AllowOrigins: []string{bad}}); err == nil {
			t.Errorf("allowed origin %q accepted", bad)
		}
	}
	for _, bad := range []string{"", "mybox.lan:8189", "http://mybox.lan", "my box"} {
		if _, err := New(Config{CheckHost: true, AllowHosts: []string{bad}}); err == nil {
			t.Errorf("allowed host %q accepted", bad)
		}
	}
}
