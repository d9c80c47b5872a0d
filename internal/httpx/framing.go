package httpx

import (
	"net/http"
	"strings"
)

// CloseAfterChunked asks the server to close an HTTP/1.1 connection once
// it has answered a request whose body came chunked.
//
// Go's server frames such a body by Transfer-Encoding and silently drops a
// Content-Length sent with it, then keeps the connection for the next
// request (golang/go#80942, still so in Go 1.27). A proxy in front that
// framed the same bytes by Content-Length disagrees about where the next
// request starts, and a request can be smuggled past it. RFC 9112 §6.1
// asks a server to close the connection after such a request; the dropped
// header cannot be seen here, so every chunked request gets that: a
// client that streams a body chunked pays one reconnect.
func CloseAfterChunked(w http.ResponseWriter, r *http.Request) {
	if r.ProtoMajor == 1 && len(r.TransferEncoding) > 0 {
		w.Header().Set("Connection", "close")
	}
}

// UntrustedContent sets the headers for bytes that a client uploaded (or a
// worker or a partner made) when the gateway serves them from its own
// origin: no type sniffing, and a policy that sandboxes the answer as a
// document. An uploaded HTML page or SVG then runs no script, in an opaque
// origin: no stored cross-site scripting on the API's origin, from which a
// script could call the API as its visitor. A policy binds only a document:
// images, video and audio that pages embed are served as before.
func UntrustedContent(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
}

// CanonicalPath reports a path with no ".", ".." or empty segment (a
// trailing slash aside): the form Caddy's path matchers compare after
// cleaning. A handler that acted on another form than the matcher saw
// could be routed past an operator's rule: /deployment/demo/../x/… matches
// a rule for /deployment/x/* and names the deployment demo.
func CanonicalPath(p string) bool {
	if !strings.HasPrefix(p, "/") {
		return false
	}
	segs := strings.Split(p[1:], "/")
	for i, s := range segs {
		if s == "." || s == ".." || (s == "" && i != len(segs)-1) {
			return false
		}
	}
	return true
}
