package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/tests/gateway"
)

// serverEnv makes the test binary act as a baseline server instead of
// running tests, so that baselines run in a process of their own, like the
// gateway does.
const serverEnv = "COMFYGATE_BENCH_SERVER"

func TestMain(m *testing.M) {
	switch os.Getenv(serverEnv) {
	case "":
		os.Exit(m.Run())
	case "naive-upload":
		serve(naiveUpload(os.Getenv("COMFYGATE_BENCH_DIR")))
	case "static-json":
		body, err := os.ReadFile(os.Getenv("COMFYGATE_BENCH_BODY"))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(body)
		}))
	default:
		fmt.Fprintln(os.Stderr, "unknown", serverEnv)
		os.Exit(2)
	}
}

// serve listens on a free loopback port, prints the address on stdout and
// serves until killed.
func serve(h http.Handler) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(l.Addr().String())
	fmt.Fprintln(os.Stderr, http.Serve(l, h))
	os.Exit(1)
}

// naiveUpload is the textbook handler the gateway is compared with:
// r.MultipartReader, NextPart, io.Copy of the file part into blake3 and a
// file, fsync. No buffer tuning: mime/multipart hands out 4 KiB reads.
func naiveUpload(dir string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fields := map[string]string{}
		var sum string
		for {
			p, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			if p.FormName() != "file" {
				b, _ := io.ReadAll(io.LimitReader(p, 4096))
				fields[p.FormName()] = string(b)
				continue
			}
			if sum, err = storeFile(dir, p); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"hash": sum, "fields": fields})
	})
}

func storeFile(dir string, p *multipart.Part) (string, error) {
	f, err := os.CreateTemp(dir, "naive-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := blake3.New()
	if _, err := io.Copy(io.MultiWriter(h, f), p); err != nil {
		return "", err
	}
	if err := f.Sync(); err != nil {
		return "", err
	}
	return fmt.Sprintf("blake3:%x", h.Sum(nil)), nil
}

// startServer runs this test binary as a baseline server of the given mode
// and returns its base URL; it is killed when the test ends.
func startServer(t *testing.T, mode string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), append(env, serverEnv+"="+mode)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("baseline server %s: %v", mode, err)
	}
	return "http://" + strings.TrimSpace(line)
}

// requireBench skips unless COMFYGATE_BENCH=1: these runs take minutes and
// measure; they are not part of the normal suite.
func requireBench(t *testing.T) {
	t.Helper()
	if os.Getenv("COMFYGATE_BENCH") != "1" {
		t.Skip("benchmark: set COMFYGATE_BENCH=1 to run (see BENCHMARKS.md)")
	}
}

// startGateway starts the real binary and returns it with its process id.
// With COMFYGATE_BENCH_PROFILE=1 the admin endpoint (and so pprof) is on, at
// an address the test logs.
// env is added to the gateway's environment.
func startGateway(t *testing.T, global string, env ...string) (*gateway.Gateway, int) {
	return startGatewayBin(t, "", global, env...)
}

// startGatewayBin is startGateway with the binary bin ("": the usual one).
func startGatewayBin(t *testing.T, bin, global string, env ...string) (*gateway.Gateway, int) {
	t.Helper()
	admin := ""
	if os.Getenv("COMFYGATE_BENCH_PROFILE") != "" {
		admin = fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
		t.Logf("admin (pprof) on %s", admin)
	}
	// COMFYGATE_BENCH_GATEWAY_ENV adds to it, for experiments ("GOGC=400").
	env = append(env, strings.Fields(os.Getenv("COMFYGATE_BENCH_GATEWAY_ENV"))...)
	g := gateway.Start(t, gateway.V2Config(global, gateway.V2Site{Admin: admin}), gateway.Options{Env: env, Binary: bin})
	pid, err := PIDWithArg(filepath.Join(g.Dir, fmt.Sprintf("Caddyfile.%d", g.Port)))
	if err != nil {
		t.Fatal(err)
	}
	return g, pid
}

func mustKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	v, err := StatusKB(pid, field)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// quiet waits (up to 20 s) for the machine to be mostly idle, so that a
// round does not start in the middle of someone else's build; it reports
// the busy fraction it settled for.
func quiet(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		busy := cpuBusy(500 * time.Millisecond)
		if busy < 0.25 || time.Now().After(deadline) {
			if busy >= 0.25 {
				t.Logf("machine still %.0f%% busy; measuring anyway", busy*100)
			}
			return
		}
	}
}

// cpuBusy is the fraction of non-idle CPU time over d, from /proc/stat.
func cpuBusy(d time.Duration) float64 {
	read := func() (idle, total int64) {
		b, err := os.ReadFile("/proc/stat")
		if err != nil {
			return 0, 0
		}
		line, _, _ := strings.Cut(string(b), "\n")
		for i, f := range strings.Fields(line)[1:] {
			var v int64
			fmt.Sscan(f, &v)
			total += v
			if i == 3 || i == 4 { // idle, iowait
				idle += v
			}
		}
		return idle, total
	}
	i0, t0 := read()
	time.Sleep(d)
	i1, t1 := read()
	if t1 == t0 {
		return 0
	}
	return 1 - float64(i1-i0)/float64(t1-t0)
}
