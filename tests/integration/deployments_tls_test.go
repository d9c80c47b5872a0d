package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestDeploymentCertificates: one on_demand TLS site with Caddy's internal
// issuer and tls.permission.comfy_deployment gets a certificate for the
// host of an existing deployment at its first handshake, and none for an
// unknown, stopped or foreign name, which fail the handshake.
func TestDeploymentCertificates(t *testing.T) {
	dir := t.TempDir()
	tlsPort, httpPort := gateway.FreePort(t), gateway.FreePort(t)
	for httpPort == tlsPort { // FreePort may answer the same port twice
		httpPort = gateway.FreePort(t)
	}
	caddyStorage := filepath.Join(dir, "caddy")
	cfg := fmt.Sprintf(`{
	admin off
	grace_period 1s
	skip_install_trust
	debug
	storage file_system %q
	http_port %d
	https_port %d
	comfygate {
		storage embedded ./data
	}
	on_demand_tls {
		permission comfy_deployment {
			domains run.example.test
		}
	}
}

(deployment_api) {
	route {
		error_envelope
		comfy_deployment {
			domains run.example.test
		}
		comfy_auth none
		comfy_jobs
		error "not found" 404
	}
}

https://:%d {
	tls internal {
		on_demand
	}
	import deployment_api
}

http://:{PORT} {
	bind 127.0.0.1
	import deployment_api
}
`, caddyStorage, httpPort, tlsPort, tlsPort)
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
	s := &serverless{Gateway: g}
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	s.cfgPath = cfgs[0]
	s.create(t, "live", "local", "", false, "ready")
	s.create(t, "booting", "local", "", false, "provisioning")
	s.create(t, "gone", "local", "", false, "stopped")

	addr := fmt.Sprintf("127.0.0.1:%d", tlsPort)
	handshake := func(name string) (*x509.Certificate, error) {
		d := &net.Dialer{Timeout: 30 * time.Second}
		conn, err := tls.DialWithDialer(d, "tcp", addr, &tls.Config{ServerName: name, InsecureSkipVerify: true})
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0], nil
	}
	for _, name := range []string{"live.run.example.test", "booting.run.example.test"} {
		cert, err := handshake(name)
		if err != nil {
			t.Fatalf("handshake for %s: %v\n%s", name, err, g.Logs())
		}
		if !slices.Contains(cert.DNSNames, name) {
			t.Errorf("certificate for %s names %v", name, cert.DNSNames)
		}
	}
	for _, name := range []string{"nobody.run.example.test", "gone.run.example.test", "live.example.org",
		"a.live.run.example.test", "Bad_Name.run.example.test"} {
		if cert, err := handshake(name); err == nil {
			t.Errorf("handshake for %s got a certificate for %v", name, cert.DNSNames)
		}
	}

	if n := strings.Count(g.Logs(), "certificate not allowed by permission module"); n < 5 {
		t.Errorf("the permission module refused %d names, want the 5 above:\n%s", n, g.Logs())
	}

	// The certificate chains to the internal CA, and the host serves the
	// deployment over it.
	root, err := os.ReadFile(filepath.Join(caddyStorage, "pki", "authorities", "local", "root.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(root)
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
	}}
	resp, err := client.Get(fmt.Sprintf("https://live.run.example.test:%d/api/v2/jobs", tlsPort))
	if err != nil {
		t.Fatalf("GET over the deployment's certificate: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET over TLS: %d", resp.StatusCode)
	}
}
