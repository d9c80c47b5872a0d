// Package browsersafe is what the gateway lets a web browser do on a
// page's behalf: the rule comfy_auth applies to every request before it
// authenticates, on every site (the v2 API, the model router, the
// ComfyUI-compatible front), and comfy_console to its own.
//
// A browser attaches the user's network position to every request a page
// makes: a page of any site can POST to http://127.0.0.1:8189 as a simple
// request (text/plain, a form, multipart), with no CORS preflight, and the
// gateway would act on it. So:
//
//   - A cross-origin request from a browser (Sec-Fetch-Site cross-site or
//     same-site, or an Origin that is not the request's host) is refused
//     for every state-changing method and for a WebSocket handshake, which
//     CORS does not protect, unless its Origin is one the operator allows.
//     A request with neither header (an SDK, curl) is not a browser's and
//     passes. Reads are left alone: the browser keeps their answers from a
//     page of another origin.
//   - Allowed origins get CORS: their preflights are answered and their
//     answers readable.
//   - On a site without authentication, a request whose Host names
//     neither an IP address, localhost nor a name the operator allows is
//     refused, whatever its method: with DNS rebinding a page's own name
//     resolves to 127.0.0.1, so its requests are same-origin to the
//     browser and carry Host: <the page's name>, which no Origin check
//     sees. An IP literal cannot be rebound.
//
// It knows nothing of Caddy.
package browsersafe

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
)

// Config is one site's policy.
type Config struct {
	// AllowOrigins are the origins (scheme://host[:port]) whose pages may
	// call the site across origins: their writes are served and their
	// CORS preflights answered.
	AllowOrigins []string
	// CheckHost refuses a Host that is not an IP literal, localhost or
	// one of AllowHosts: for a site that does not authenticate.
	CheckHost bool
	// AllowHosts are further host names (without port) that CheckHost
	// accepts: the names the site is reached by.
	AllowHosts []string
}

// Policy applies a Config. The zero value refuses cross-origin writes,
// allows no origin and does not check Host.
type Policy struct {
	cop       http.CrossOriginProtection
	origins   map[string]bool
	checkHost bool
	hosts     map[string]bool
}

// New checks c and builds its policy.
func New(c Config) (*Policy, error) {
	p := &Policy{checkHost: c.CheckHost}
	for _, o := range c.AllowOrigins {
		norm, err := NormalizeOrigin(o)
		if err != nil {
			return nil, err
		}
		if err := p.cop.AddTrustedOrigin(norm); err != nil {
			return nil, err
		}
		if p.origins == nil {
			p.origins = map[string]bool{}
		}
		p.origins[norm] = true
	}
	for _, h := range c.AllowHosts {
		if h == "" || strings.ContainsAny(h, ":/ ") {
			return nil, fmt.Errorf("allowed host %q: a host name without port or scheme", h)
		}
		if p.hosts == nil {
			p.hosts = map[string]bool{}
		}
		p.hosts[strings.ToLower(h)] = true
	}
	return p, nil
}

// NormalizeOrigin returns an origin as a browser sends it in Origin:
// scheme and host in lower case, without the scheme's default port.
func NormalizeOrigin(o string) (string, error) {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return "", fmt.Errorf("allowed origin %q: %w", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return "", fmt.Errorf("allowed origin %q: the scheme must be http or https", o)
	case u.Host == "" || u.User != nil || u.Opaque != "":
		return "", fmt.Errorf("allowed origin %q: must be scheme://host[:port]", o)
	case (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.ForceQuery:
		return "", fmt.Errorf("allowed origin %q: an origin has no path, query or fragment", o)
	}
	host := strings.ToLower(u.Host)
	if p := u.Port(); (u.Scheme == "http" && p == "80") || (u.Scheme == "https" && p == "443") {
		host = strings.ToLower(u.Hostname())
		if strings.Contains(host, ":") {
			host = "[" + host + "]"
		}
	}
	return u.Scheme + "://" + host, nil
}

// Check returns a 403 forbidden *apierr.Error for a request the policy
// refuses, nil for one it serves.
func (p *Policy) Check(r *http.Request) error {
	if p.checkHost && !p.hostAllowed(r.Host) {
		return apierr.New(http.StatusForbidden, "forbidden",
			"this gateway does not answer requests for this host name without authentication (DNS rebinding guard); "+
				"the operator can allow the name (comfy_auth none { allow_host <name> })")
	}
	c := r
	if isWebSocket(r) {
		// A handshake is a GET, but CORS does not keep its answer from
		// the page: it is checked as a write.
		post := *r
		post.Method = http.MethodPost
		c = &post
	}
	if p.cop.Check(c) != nil {
		return apierr.New(http.StatusForbidden, "forbidden",
			"cross-origin requests from a web page are refused; the operator can allow the page's origin (allow_origin)")
	}
	return nil
}

// Serve applies the policy before a request is served: it returns Check's
// error for a refused request, answers a CORS preflight of an allowed
// origin itself (handled, and the request must go no further) and gives
// the answers to an allowed origin the CORS headers that let its page
// read them. A preflight of any other origin is refused: no handler
// after this one answers OPTIONS.
func (p *Policy) Serve(w http.ResponseWriter, r *http.Request) (handled bool, err error) {
	if len(p.origins) > 0 {
		w.Header().Add("Vary", "Origin") // the answer depends on it, refusals included
	}
	if err := p.Check(r); err != nil {
		return false, err
	}
	origin := r.Header.Get("Origin")
	allowed := origin != "" && p.origins[origin]
	preflight := r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != ""
	switch {
	case preflight && !allowed:
		return false, apierr.New(http.StatusForbidden, "forbidden",
			"cross-origin requests from this origin are refused; the operator can allow it (allow_origin)")
	case preflight:
		h := w.Header()
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Methods", "GET, HEAD, POST, PUT, PATCH, DELETE")
		if req := r.Header.Get("Access-Control-Request-Headers"); req != "" {
			h.Set("Access-Control-Allow-Headers", req)
		}
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(http.StatusNoContent)
		return true, nil
	case allowed:
		// Credentials travel in Authorization, not cookies, so the
		// wildcard exposes every header.
		w.Header().Set("Access-Control-Allow-Origin", origin)
		w.Header().Set("Access-Control-Expose-Headers", "*")
	}
	return false, nil
}

// hostAllowed reports whether CheckHost accepts hostport.
func (p *Policy) hostAllowed(hostport string) bool {
	if hostport == "" {
		return true // HTTP/1.0 without Host: nothing a browser sends
	}
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if net.ParseIP(host) != nil || host == "localhost" {
		return true
	}
	return p.hosts[host]
}

// isWebSocket reports whether r asks to upgrade to a WebSocket.
func isWebSocket(r *http.Request) bool {
	for _, v := range r.Header.Values("Upgrade") {
		for _, f := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), "websocket") {
				return true
			}
		}
	}
	return false
}
