package provider

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/comfygate/comfygate/modules/router/catalog"
)

// MaxResponseBytes bounds a partner answer read into memory.
const MaxResponseBytes = 64 << 20

// Options configure a Client.
type Options struct {
	// AllowInsecure permits http:// upstreams and private, loopback and
	// link-local destinations. It exists for tests against local peers and
	// must stay off in production.
	AllowInsecure bool
	// Timeout bounds one HTTP exchange in addition to the caller's context
	// (0: none beyond the context).
	Timeout time.Duration
}

// Client is the outbound HTTP client every adapter shares: https only,
// destinations checked at dial time, no redirects, no cookies.
type Client struct {
	hc   *http.Client
	opts Options
}

// NewClient builds a Client.
func NewClient(opts Options) *Client {
	dialer := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	if !opts.AllowInsecure {
		dialer.Control = refusePrivate
	}
	tr := &http.Transport{
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          512,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Proxy is deliberately nil: an environment proxy would bypass the
		// dial-time address check.
	}
	return &Client{opts: opts, hc: &http.Client{
		Transport: tr,
		Timeout:   opts.Timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse // a redirect could point anywhere
		},
	}}
}

// refusePrivate is the dialer's Control hook: it sees the resolved address
// actually dialed, so DNS rebinding cannot slip a private address past it.
func refusePrivate(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, address)
	}
	if !PublicAddr(ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrBlockedAddress, ap.Addr())
	}
	return nil
}

var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// PublicAddr reports whether a is a public unicast address.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsValid() && a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() &&
		!a.IsLinkLocalUnicast() && !cgnat.Contains(a)
}

// hopByHop are never forwarded (RFC 9110 §7.6.1 plus legacy ones).
var hopByHop = map[string]bool{
	"Connection": true, "Proxy-Connection": true, "Keep-Alive": true, "Proxy-Authenticate": true,
	"Proxy-Authorization": true, "Te": true, "Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
}

// dropped request headers: the caller's own credential, cookies, forwarding
// claims, our idempotency key, and headers the transport sets itself.
var dropped = map[string]bool{
	"Authorization": true, "Cookie": true, "Forwarded": true, "Via": true, "Idempotency-Key": true,
	"Host": true, "Content-Length": true, "Accept-Encoding": true, "Expect": true,
}

// outboundHeader builds the partner request's headers from the client's.
func outboundHeader(in http.Header, m *catalog.Model) http.Header {
	out := make(http.Header, 4)
	for k, vs := range in {
		ck := http.CanonicalHeaderKey(k)
		if hopByHop[ck] || dropped[ck] || strings.HasPrefix(ck, "X-Forwarded-") || strings.HasPrefix(ck, "X-Service-") {
			continue
		}
		if ck == "Content-Type" || ck == "Accept" || ck == "Accept-Language" || ck == "User-Agent" ||
			strings.HasPrefix(ck, "X-Fal-") {
			out[ck] = append([]string(nil), vs...)
		}
	}
	if out.Get("Content-Type") == "" {
		out.Set("Content-Type", "application/json")
	}
	if m.CredentialHeader != "" && m.Credential != "" {
		out.Set(m.CredentialHeader, m.CredentialValue())
	}
	return out
}

// Answer is a partner HTTP answer read whole. Response headers other than
// Content-Type are not kept, so Set-Cookie never reaches the caller.
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
	Header      http.Header // the partner's headers, for classification only
}

// Do sends one request to rawURL with the model's credential and reads the
// answer (bounded). Client headers in `in` are filtered by outboundHeader.
func (c *Client) Do(ctx context.Context, m *catalog.Model, method, rawURL string, body []byte, in http.Header) (*Answer, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("provider: bad upstream url: %w", err)
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && c.opts.AllowInsecure) {
		return nil, fmt.Errorf("%w: %s", ErrInsecureScheme, u.Scheme)
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, fmt.Errorf("provider: build request: %w", err)
	}
	if body != nil {
		req.Header = outboundHeader(in, m)
	} else {
		req.Header = outboundHeader(nil, m)
		req.Header.Del("Content-Type")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("provider: %s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("provider: read answer: %w", err)
	}
	if len(data) > MaxResponseBytes {
		return nil, fmt.Errorf("provider: answer over %d bytes", MaxResponseBytes)
	}
	return &Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: data, Header: resp.Header}, nil
}
