package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/comfygate/comfygate/internal/router/catalog"
	"github.com/comfygate/comfygate/internal/tracing"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.37.0"
	"go.opentelemetry.io/otel/trace"
)

// MaxResponseBytes bounds a partner answer read into memory.
const MaxResponseBytes = 64 << 20

// DefaultResponseHeaderTimeout bounds the wait for a partner's response
// headers when Options sets none. It must exceed the longest synchronous
// model deadline (the catalog's default deadline is 10 minutes); polls and
// cancels have their own, much shorter bound (exchangeTimeout).
const DefaultResponseHeaderTimeout = 15 * time.Minute

// exchangeTimeout bounds one poll, result or cancel exchange: they answer
// at once on every partner, and a hung one must not pin a follower.
const exchangeTimeout = time.Minute

// Options configure a Client.
type Options struct {
	// AllowInsecure permits http:// upstreams and private, loopback and
	// link-local destinations. It exists for tests against local peers and
	// must stay off in production.
	AllowInsecure bool
	// Timeout bounds one HTTP exchange in addition to the caller's context
	// (0: none beyond the context).
	Timeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers (0:
	// DefaultResponseHeaderTimeout).
	ResponseHeaderTimeout time.Duration
	// ResponseBudget, when positive, gives this client its own bound on
	// answer bytes being read at once; 0 shares the process-wide budget
	// (DefaultResponseBudget).
	ResponseBudget int64
	// BudgetWait is how long a read waits for room in the budget before
	// failing with ErrResponseBudget (0: DefaultBudgetWait).
	BudgetWait time.Duration
}

// Client is the outbound HTTP client every adapter shares: https only,
// destinations checked at dial time, no redirects, no cookies.
type Client struct {
	hc     *http.Client
	opts   Options
	budget *byteBudget
}

// NewClient builds a Client.
func NewClient(opts Options) *Client {
	if opts.ResponseHeaderTimeout <= 0 {
		opts.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if opts.BudgetWait <= 0 {
		opts.BudgetWait = DefaultBudgetWait
	}
	budget := processBudget
	if opts.ResponseBudget > 0 {
		budget = newByteBudget(opts.ResponseBudget)
	}
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
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		// Proxy is deliberately nil: an environment proxy would bypass the
		// dial-time address check.
	}
	return &Client{opts: opts, budget: budget, hc: &http.Client{
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

// blockedPrefixes are global-unicast-looking ranges that reach private
// space: carrier-grade NAT, and the IPv6 translation prefixes that embed an
// IPv4 address (NAT64 well-known and local-use, 6to4), through which
// 64:ff9b::a9fe:a9fe would reach 169.254.169.254.
var blockedPrefixes = []netip.Prefix{
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("64:ff9b::/96"),
	netip.MustParsePrefix("64:ff9b:1::/48"),
	netip.MustParsePrefix("2002::/16"),
}

// PublicAddr reports whether a is a public unicast address.
func PublicAddr(a netip.Addr) bool {
	a = a.Unmap()
	if !a.IsValid() || !a.IsGlobalUnicast() || a.IsPrivate() || a.IsLoopback() || a.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range blockedPrefixes {
		if p.Contains(a) {
			return false
		}
	}
	return true
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
func (c *Client) Do(ctx context.Context, m *catalog.Model, method, rawURL string, body []byte, in http.Header) (a *Answer, err error) {
	// The span's attributes are set once, at its end (one allocation).
	ctx, span := tracing.Start(ctx, "router.partner_request", clientSpan)
	host, status := "", 0
	defer func() {
		if span.IsRecording() {
			tracing.FailAs(span, failureBucket(m, a, err))
			attrs := [4]attribute.KeyValue{semconv.HTTPRequestMethodKey.String(method), semconv.GenAIRequestModel(m.ID)}
			n := 2
			if host != "" {
				attrs[n] = semconv.ServerAddress(host)
				n++
			}
			if status != 0 {
				attrs[n] = semconv.HTTPResponseStatusCode(status)
				n++
			}
			span.SetAttributes(attrs[:n]...)
		}
		span.End()
	}()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, rawURL, rd) // parses rawURL, once
	if err != nil {
		return nil, fmt.Errorf("provider: bad upstream url: %w", err)
	}
	u := req.URL
	if u.Host == "" {
		return nil, errors.New("provider: bad upstream url: no host")
	}
	if u.Scheme != "https" && !(u.Scheme == "http" && c.opts.AllowInsecure) {
		return nil, fmt.Errorf("%w: %s", ErrInsecureScheme, u.Scheme)
	}
	if body != nil {
		req.Header = outboundHeader(in, m)
	} else {
		req.Header = outboundHeader(nil, m)
		req.Header.Del("Content-Type")
	}
	if span.IsRecording() {
		host = u.Hostname()
	}
	tracing.Inject(ctx, req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("provider: %s %s: %w", method, u.Redacted(), err)
	}
	defer resp.Body.Close()
	status = resp.StatusCode
	data, err := c.readBody(ctx, resp.Body, resp.ContentLength)
	if err != nil {
		return nil, err
	}
	return &Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: data, Header: resp.Header}, nil
}

// failureBucket is the bucket of a failed partner request, "" for one
// the partner answered below 400: an error answer's classification (the
// bucket the call would end with on it), provider_timeout for a request
// that timed out, service_unavailable when the answer found no room in
// the response budget, and provider_error for any other failure to send
// the request or read its answer.
func failureBucket(m *catalog.Model, a *Answer, err error) string {
	var ne net.Error
	switch {
	case err == nil && a != nil && a.Status >= 400:
		return Classify(m, a).Bucket
	case err == nil:
		return ""
	case errors.Is(err, ErrResponseBudget):
		return BucketServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return BucketProviderTimout
	}
	return BucketProviderError
}

// clientSpan is the partner request span's kind, a start option allocated once.
var clientSpan = trace.WithSpanKind(trace.SpanKindClient)

// ErrHandleURL is a URL from a partner's answer (a poll, result or cancel
// handle) that points outside the partner's hosts. It is refused before any
// request is sent, so the partner credential never leaves for it.
var ErrHandleURL = errors.New("provider: handle url outside the partner's hosts")

// handleURLAllowed checks a URL taken from a partner's answer before the
// credential is attached to it: it must have the scheme and host (with port)
// of the model's configured upstream, or be https on the default port under
// one of the adapter's host suffixes.
func handleURLAllowed(m *catalog.Model, raw string, suffixes []string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.User != nil {
		return fmt.Errorf("%w: unparsable", ErrHandleURL)
	}
	if up, err := url.Parse(m.Upstream); err == nil && up.Host != "" &&
		strings.EqualFold(u.Scheme, up.Scheme) && strings.EqualFold(u.Host, up.Host) {
		return nil
	}
	host := strings.ToLower(u.Hostname())
	if u.Scheme == "https" && (u.Port() == "" || u.Port() == "443") {
		for _, sfx := range suffixes {
			if strings.HasSuffix(host, sfx) && len(host) > len(sfx) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: %s", ErrHandleURL, u.Redacted())
}
