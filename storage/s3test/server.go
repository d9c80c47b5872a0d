package s3test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is a private S3 server process (the test server's binary on a
// port and directory of its own) that a test may stop and start again, for
// tests of a store that goes down. It is stopped when the test ends.
type Server struct {
	bin, dir, addr string
	logPath        string
	access, secret string

	mu  sync.Mutex
	cmd *exec.Cmd
}

// StartServer starts a private server on a free port with an empty
// directory.
func StartServer(t testing.TB) *Server {
	t.Helper()
	bin := os.Getenv(BinEnv)
	if bin == "" {
		t.Fatalf("s3test: %s is not set: %s", BinEnv, howToStart)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	s := &Server{bin: bin, dir: t.TempDir(), addr: addr, access: "private-test", secret: "private-test-secret"}
	s.logPath = filepath.Join(t.TempDir(), "server.log")
	s.Start(t)
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			logs, _ := os.ReadFile(s.logPath)
			t.Logf("private S3 server on %s logs:\n%s", s.addr, logs)
		}
	})
	return s
}

// Endpoint is the server's base URL.
func (s *Server) Endpoint() string { return "http://" + s.addr }

// Bucket creates a bucket on this server and returns how to reach it. The
// server must be running.
func (s *Server) Bucket(t testing.TB) Config {
	t.Helper()
	return newBucket(t, Config{Endpoint: s.Endpoint(), Region: "us-east-1", AccessKey: s.access, SecretKey: s.secret})
}

// Start starts the server (again, with the same port and contents) and
// waits until it accepts connections.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		t.Fatal("s3test: server already running")
	}
	logs, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close() // the child has its own descriptor
	cmd := exec.Command(s.bin, "--port", s.addr, "--access", s.access, "--secret", s.secret, "--quiet", "posix", s.dir)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("s3test: start %s: %v", s.bin, err)
	}
	s.cmd = cmd
	deadline := time.Now().Add(reachTimeout)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", s.addr, 100*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, _ := os.ReadFile(s.logPath)
	t.Fatalf("s3test: server on %s did not start:\n%s", s.addr, out)
}

// Stop kills the server at once (as a crash or a lost network would end
// it) and waits for it to exit.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

// String names the server in messages.
func (s *Server) String() string { return fmt.Sprintf("S3 server %s (%s)", s.addr, s.dir) }
