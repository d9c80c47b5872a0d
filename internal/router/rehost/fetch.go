package rehost

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"syscall"
	"time"
)

// ErrRefusedAddress is a result URL whose host resolves to an address the
// gateway does not fetch from (loopback, private, link-local …).
var ErrRefusedAddress = errors.New("rehost: refused address")

// maxRedirects bounds the redirects one fetch follows.
const maxRedirects = 5

// refused reports whether a is an address a partner must not make the
// gateway call: loopback, private (RFC 1918, ULA), link-local (cloud
// metadata), unspecified, multicast, CGNAT and the other non-global ranges.
func refused(a netip.Addr) bool {
	a = a.Unmap()
	if a.IsLoopback() || a.IsPrivate() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() ||
		a.IsInterfaceLocalMulticast() || a.IsMulticast() || a.IsUnspecified() || !a.IsGlobalUnicast() {
		return true
	}
	for _, p := range nonGlobal {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

var nonGlobal = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2002::/16"),       // 6to4 may embed a private v4
	netip.MustParsePrefix("::ffff:0:0/96"),   // mapped, already unmapped above
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64 may embed a private v4
	netip.MustParsePrefix("2001::/32"),       // Teredo
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
}

// dialControl refuses a connection to a refused address. It runs after name
// resolution, on the address actually dialled, so a name that resolves to a
// public address when checked and to a private one when dialled (DNS
// rebinding) is still refused.
func dialControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q", ErrRefusedAddress, address)
	}
	if refused(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrRefusedAddress, ap.Addr())
	}
	return nil
}

// newHTTPClient is the client results are fetched with: its own transport
// (no proxy from the environment: a proxy would dial for us, past the
// address check), the address check at dial time unless allowPrivate, and
// redirects limited to http(s) and maxRedirects (each one dials again, so
// is checked again).
func newHTTPClient(allowPrivate bool, timeout time.Duration) *http.Client {
	control := dialControl
	if allowPrivate {
		control = nil
	}
	return newClientWith(control, timeout)
}

// newClientWith is newHTTPClient with the dial check control (nil: none).
func newClientWith(control func(network, address string, c syscall.RawConn) error, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: min(timeout, 10*time.Second), KeepAlive: 30 * time.Second, Control: control}
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          32,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= maxRedirects {
				return fmt.Errorf("rehost: more than %d redirects", maxRedirects)
			}
			return checkURL(req.URL)
		},
	}
}

// checkURL admits only absolute http(s) URLs without credentials.
func checkURL(u *url.URL) error {
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("rehost: %q is not an http(s) URL", u.Redacted())
	}
	if u.User != nil {
		return errors.New("rehost: URLs with credentials are not fetched")
	}
	return nil
}

// isRefusal tells a refused address from other fetch failures.
func isRefusal(err error) bool { return errors.Is(err, ErrRefusedAddress) }
