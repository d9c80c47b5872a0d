// Package browser runs a headless Chromium for tests, driven over the
// DevTools protocol with chromedp. tests/run installs Debian's chromium
// when it is missing; a test that needs it and cannot find it fails.
package browser

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"os/exec"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Options shape the browser.
type Options struct {
	// TrustCertOf is the host:port of a TLS server whose certificate the
	// browser accepts (by its public key), for servers on a test CA.
	TrustCertOf string
	// TLS is the client configuration that verifies that server.
	TLS *tls.Config
	// Resolve maps host names to addresses for the browser alone (say
	// "evil.test" → "127.0.0.1"), as a DNS answer would: pages of other
	// sites, and DNS rebinding, without a DNS server.
	Resolve map[string]string
}

// New starts a headless Chromium for the test and returns a context that
// chromedp actions run in; the browser ends with the test.
func New(t testing.TB, o Options) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed; tests/run installs it (apt-get install chromium): %v", err)
	}
	flags := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root here
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	if len(o.Resolve) > 0 {
		var rules []string
		for name, addr := range o.Resolve {
			rules = append(rules, "MAP "+name+" "+addr)
		}
		flags = append(flags, chromedp.Flag("host-resolver-rules", strings.Join(rules, ",")))
	}
	if o.TrustCertOf != "" {
		flags = append(flags, chromedp.Flag("ignore-certificate-errors-spki-list", spkiHash(t, o.TrustCertOf, o.TLS)))
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), flags...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
	})
	// Start the browser now (on ctx itself: the browser lives as long as
	// the context of the first call), so that a broken installation fails
	// here.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// spkiHash is the base64 SHA-256 of the public key of the certificate
// addr presents (verified with conf), the form Chromium's
// --ignore-certificate-errors-spki-list takes: the browser then accepts
// that key and no other.
func spkiHash(t testing.TB, addr string, conf *tls.Config) string {
	t.Helper()
	conn, err := tls.Dial("tcp", addr, conf)
	if err != nil {
		t.Fatalf("TLS handshake with %s: %v", addr, err)
	}
	defer conn.Close()
	leaf := conn.ConnectionState().PeerCertificates[0]
	sum := sha256.Sum256(leaf.RawSubjectPublicKeyInfo)
	return base64.StdEncoding.EncodeToString(sum[:])
}
