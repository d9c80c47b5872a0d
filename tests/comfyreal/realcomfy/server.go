package realcomfy

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// readyWithin bounds a server's start (10–40 s on a loaded machine; a few
// seconds on an idle one).
const readyWithin = 3 * time.Minute

// Server is one running ComfyUI.
type Server struct {
	// URL is its base URL, http://127.0.0.1:<Port>.
	URL  string
	Port int
	// Root holds its directories and its log (comfyui.log). InputDir is
	// its --input-directory, OutputDir its --output-directory; its temp
	// files (PreviewImage) are under TempDir, which ComfyUI makes
	// <--temp-directory>/temp.
	Root, InputDir, OutputDir, TempDir string

	src *Source
	mu  sync.Mutex
	cmd *exec.Cmd
	// exited is closed when the current process has exited.
	exited chan struct{}
}

// Start starts n servers at once, each on a free port with its own
// directories under t's temp dir, and waits until every one answers (GET
// /object_info/LoadImage is 200). They are killed when t ends; a test that
// failed logs the tail of their output.
func (s *Source) Start(t testing.TB, n int) []*Server {
	t.Helper()
	servers := make([]*Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range servers {
		root := t.TempDir()
		srv := &Server{Root: root, InputDir: filepath.Join(root, "in"), OutputDir: filepath.Join(root, "out"),
			TempDir: filepath.Join(root, "tmp", "temp"), src: s}
		servers[i] = srv
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("ComfyUI %s, the end of its output:\n%s", srv.URL, tail(srv.Log(), 3000))
			}
			srv.Kill()
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = srv.launch(0)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ComfyUI server %d: %v\n%s", i, err, tail(servers[i].Log(), 3000))
		}
	}
	return servers
}

// Restart starts the server again on the same port and directories after
// it exited (Kill, Signal), and waits until it answers.
func (srv *Server) Restart(t testing.TB) {
	t.Helper()
	srv.Kill()
	if err := srv.launch(srv.Port); err != nil {
		t.Fatalf("restarting ComfyUI %s: %v\n%s", srv.URL, err, tail(srv.Log(), 3000))
	}
}

// launch starts the process (on port, or a free one when 0) and waits for
// it to answer.
func (srv *Server) launch(port int) error {
	for _, d := range []string{srv.InputDir, srv.OutputDir, filepath.Dir(srv.TempDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if port == 0 {
		p, err := freePort()
		if err != nil {
			return err
		}
		port = p
	}
	srv.Port, srv.URL = port, fmt.Sprintf("http://127.0.0.1:%d", port)
	logFile, err := os.OpenFile(filepath.Join(srv.Root, "comfyui.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(srv.src.Python, "main.py", "--cpu", "--listen", "127.0.0.1", "--port", strconv.Itoa(port),
		"--input-directory", srv.InputDir, "--output-directory", srv.OutputDir,
		"--temp-directory", filepath.Dir(srv.TempDir), "--disable-auto-launch")
	cmd.Dir = srv.src.Dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+srv.src.Stubs, "PYTHONUNBUFFERED=1")
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	// Its own process group (Signal reaches all of it), killed with the
	// test process should that die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return err
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		logFile.Close()
		close(exited)
	}()
	srv.mu.Lock()
	srv.cmd, srv.exited = cmd, exited
	srv.mu.Unlock()
	return srv.awaitReady(exited)
}

func (srv *Server) awaitReady(exited <-chan struct{}) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyWithin)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("ComfyUI exited before it answered")
		default:
		}
		resp, err := client.Get(srv.URL + "/object_info/LoadImage")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("ComfyUI did not answer within %v", readyWithin)
}

// Signal sends sig to the server's process and waits (bounded) for it to
// exit. ComfyUI installs no handler for SIGTERM: it dies at once, as with
// SIGKILL, without closing its sockets.
func (srv *Server) Signal(sig syscall.Signal) {
	srv.mu.Lock()
	cmd, exited := srv.cmd, srv.exited
	srv.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exited
	}
}

// Up reports whether the server's process is running.
func (srv *Server) Up() bool {
	srv.mu.Lock()
	exited := srv.exited
	srv.mu.Unlock()
	if exited == nil {
		return false
	}
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Kill kills the server's process group with SIGKILL and waits for it.
func (srv *Server) Kill() { srv.Signal(syscall.SIGKILL) }

// Log is everything the server's processes printed (restarts included),
// as kept in <Root>/comfyui.log.
func (srv *Server) Log() string {
	data, _ := os.ReadFile(filepath.Join(srv.Root, "comfyui.log"))
	return string(data)
}

// Executions counts the prompts the server executed to the end
// (successful, failed or interrupted; restarts included): ComfyUI logs
// "Prompt executed in" once for each.
func (srv *Server) Executions() int { return strings.Count(srv.Log(), "Prompt executed in ") }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
