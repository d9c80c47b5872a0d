// Package gateway runs the real comfygate binary for integration tests: it
// builds cmd/comfygate (or uses $COMFYGATE_BIN), starts it on a free port
// with a test's Caddyfile, waits until it answers, and stops or kills it.
package gateway

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	buildPath string
	buildErr  error
)

// Binary returns the path of a comfygate binary, building it once per test
// process unless COMFYGATE_BIN names one.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("COMFYGATE_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		root, err := repoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "comfygate-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildPath = filepath.Join(dir, "comfygate")
		cmd := exec.Command("go", "build", "-o", buildPath, "./cmd/comfygate")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildPath
}

// RepoRoot returns the repository root (the directory holding go.mod).
func RepoRoot(t testing.TB) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Gateway is one running gateway process.
type Gateway struct {
	// URL is http://127.0.0.1:<port>, or https://127.0.0.1:<port> with
	// Options.TLS.
	URL string
	// Port is the HTTP port.
	Port int
	// Dir is the process's working directory (embedded data lives under it).
	Dir string

	cmd  *exec.Cmd
	logs *lockedBuffer
	done chan struct{}
}

// Options configure Start.
type Options struct {
	// Port to listen on; 0 picks a free one.
	Port int
	// Dir is the working directory; empty means a fresh temp dir.
	Dir string
	// Env is added to the process environment.
	Env []string
	// TLS says the Caddyfile serves https://127.0.0.1:{PORT} with
	// Caddy's internal CA (tls internal, skip_install_trust). Caddy's
	// data directory, which holds that CA, is then under Dir (see
	// CACertFile).
	TLS bool
	// Binary is the executable to run; empty means Binary(t).
	Binary string
}

// Start writes caddyfile (with {PORT} replaced) and runs the gateway with it.
// The process is stopped when the test ends. A port Start picked itself
// that something else took before the gateway bound it (FreePort can only
// offer a port that was free; a client's connection may take it next) is
// picked again, up to three times.
func Start(t testing.TB, caddyfile string, opts Options) *Gateway {
	t.Helper()
	picked := opts.Port == 0
	for attempt := 1; ; attempt++ {
		if picked {
			opts.Port = FreePort(t)
		}
		g, err := start(t, caddyfile, opts)
		if err == nil {
			return g
		}
		if !picked || attempt == 3 || !strings.Contains(g.logs.String(), "address already in use") {
			t.Fatal(err)
		}
		t.Logf("port %d was taken before the gateway bound it; picking another", opts.Port)
	}
}

func start(t testing.TB, caddyfile string, opts Options) (*Gateway, error) {
	t.Helper()
	bin := opts.Binary
	if bin == "" {
		bin = Binary(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	cfg := strings.ReplaceAll(caddyfile, "{PORT}", fmt.Sprint(opts.Port))
	cfgPath := filepath.Join(opts.Dir, fmt.Sprintf("Caddyfile.%d", opts.Port))
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	scheme := "http"
	if opts.TLS {
		scheme = "https"
		opts.Env = append(opts.Env, "XDG_DATA_HOME="+filepath.Join(opts.Dir, "xdg-data"),
			"XDG_CONFIG_HOME="+filepath.Join(opts.Dir, "xdg-config"))
	}
	g := &Gateway{
		URL:  fmt.Sprintf("%s://127.0.0.1:%d", scheme, opts.Port),
		Port: opts.Port,
		Dir:  opts.Dir,
		logs: &lockedBuffer{},
		done: make(chan struct{}),
	}
	g.cmd = exec.Command(bin, "run", "--config", cfgPath, "--adapter", "caddyfile")
	g.cmd.Dir = opts.Dir
	g.cmd.Env = append(os.Environ(), opts.Env...)
	g.cmd.Stdout = g.logs
	g.cmd.Stderr = g.logs
	if err := g.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.cmd.Wait(); close(g.done) }()
	t.Cleanup(func() {
		g.Stop()
		if t.Failed() {
			t.Logf("gateway on :%d logs:\n%s", g.Port, g.logs.String())
		}
	})
	return g, g.waitReady()
}

func (g *Gateway) waitReady() error {
	deadline := time.Now().Add(60 * time.Second)
	// The probe only asks whether the site answers; trusting the internal
	// CA is the tests' business (CACertFile).
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	for time.Now().Before(deadline) {
		select {
		case <-g.done:
			return fmt.Errorf("gateway exited during start:\n%s", g.logs.String())
		default:
		}
		// Caddy may serve requests before every app has started, so ready
		// means both: the port answers and the whole config is running.
		resp, err := client.Get(g.URL + "/api/v2/assets/00000000-0000-0000-0000-000000000000")
		if err == nil {
			resp.Body.Close()
			if strings.Contains(g.logs.String(), "serving initial configuration") {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("gateway did not start within 60s:\n%s", g.logs.String())
}

// CACertFile is the PEM root certificate of the internal CA of a gateway
// started with Options.TLS.
func (g *Gateway) CACertFile() string {
	return filepath.Join(g.Dir, "xdg-data", "caddy", "pki", "authorities", "local", "root.crt")
}

// TLSConfig trusts the internal CA of a gateway started with Options.TLS
// and nothing else.
func (g *Gateway) TLSConfig(t testing.TB) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(g.CACertFile())
	if err != nil {
		t.Fatalf("internal CA: %v", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("internal CA: no certificate in %s", g.CACertFile())
	}
	return &tls.Config{RootCAs: pool}
}

// PID is the gateway process's id (for /proc sampling).
func (g *Gateway) PID() int { return g.cmd.Process.Pid }

// Logs returns what the process printed so far.
func (g *Gateway) Logs() string { return g.logs.String() }

// Stop asks the process to exit and waits, killing it after 15 s.
func (g *Gateway) Stop() {
	select {
	case <-g.done:
		return
	default:
	}
	_ = g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(15 * time.Second):
		g.Kill()
	}
}

// Kill ends the process at once (kill -9) and waits for it.
func (g *Gateway) Kill() {
	_ = g.cmd.Process.Kill()
	<-g.done
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
