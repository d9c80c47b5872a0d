package packaging

import (
	"bufio"
	"bytes"
	"image"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// quickStartMarker precedes a README block that TestQuickStart runs: the
// server's (": server") or one a user pastes into another terminal.
var quickStartMarker = regexp.MustCompile(`^<!-- quickstart(: server)?\b.*-->$`)

// quickStart is the README's quick start: the server's command and the
// blocks run against it, in order, each as written.
type quickStart struct {
	server  string
	clients []string
}

// readQuickStart extracts the marked ```sh blocks of a README.
func readQuickStart(t *testing.T, readme []byte) quickStart {
	t.Helper()
	var qs quickStart
	lines := strings.Split(string(readme), "\n")
	for i := 0; i < len(lines); i++ {
		m := quickStartMarker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("README line %d: a quickstart marker must be followed by a ```sh block", i+1)
		}
		var block []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			block = append(block, lines[i])
		}
		text := strings.Join(block, "\n") + "\n"
		if m[1] != "" {
			if qs.server != "" {
				t.Fatal("README: two quickstart server blocks")
			}
			qs.server = text
		} else {
			qs.clients = append(qs.clients, text)
		}
	}
	if qs.server == "" || len(qs.clients) == 0 {
		t.Fatalf("README has no quick start marked for this test (%d server, %d other blocks)", len(qs.server), len(qs.clients))
	}
	return qs
}

// TestQuickStart (issue 26, item 8) runs the README's quick start as
// written, in a copy of the files a clone has (git ls-files: nothing
// untracked), against the real binary: `go run ./cmd/comfygate` is that
// binary (a shell function named go stands for the build, which the other
// packaging tests cover). It runs in a network namespace of its own
// (unshare -rn), so that the example's fixed ports (8189, and Caddy's admin
// endpoint on 2019) cannot meet another gateway on this machine; where
// unshare is not allowed it runs on the host's network when both ports are
// free. Every block must succeed, the uploaded text come back, the job
// succeed and inverted.png be docs/photo.png inverted.
func TestQuickStart(t *testing.T) {
	bin := gateway.Binary(t)
	root := gateway.RepoRoot(t)
	clone := t.TempDir()
	copyTracked(t, root, clone)
	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	qs := readQuickStart(t, readme)

	// One script: the server in the background, then each block in a shell
	// of its own (as pasted into a terminal), with a line between blocks.
	var script strings.Builder
	script.WriteString(`set -u
go() {
	if [ "$1" = run ] && [ "$2" = ./cmd/comfygate ]; then shift 2; exec "$COMFYGATE_QUICKSTART_BIN" "$@"; fi
	echo "the quick start runs go $*, which this test does not stand for" >&2; return 1
}
export -f go
`)
	script.WriteString("bash -c " + shellQuote(qs.server) + " >server.log 2>&1 &\nserver=$!\n")
	script.WriteString(`for _ in $(seq 1 150); do
	curl -s -o /dev/null http://127.0.0.1:8189/ && break
	kill -0 $server 2>/dev/null || { echo "the server exited:"; cat server.log; exit 1; }
	sleep 0.2
done
status=0
`)
	for i, block := range qs.clients {
		script.WriteString("echo '===== block " + string(rune('1'+i)) + "'\n")
		script.WriteString("bash -e -c " + shellQuote(block) + " || { status=$?; echo \"===== block failed: $status\"; }\n")
	}
	script.WriteString("kill -TERM $server; wait $server\nexit $status\n")
	if err := os.WriteFile(filepath.Join(clone, ".quickstart.sh"), []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("unshare", "-rn", "bash", "-c", "ip link set lo up && exec bash .quickstart.sh")
	if err := exec.Command("unshare", "-rn", "ip", "link", "set", "lo", "up").Run(); err != nil {
		t.Logf("unshare -rn is not allowed here (%v): running on the host's network", err)
		for _, addr := range []string{"127.0.0.1:8189", "127.0.0.1:2019"} {
			if portInUse(addr) {
				t.Fatalf("%s is in use and no network namespace can be made: the quick start needs it", addr)
			}
		}
		cmd = exec.Command("bash", ".quickstart.sh")
	}
	cmd.Dir = clone
	home := t.TempDir() // Caddy's autosave and data go here, not in the user's home
	cmd.Env = append(os.Environ(), "COMFYGATE_QUICKSTART_BIN="+bin, "HOME="+home,
		"XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "XDG_DATA_HOME="+filepath.Join(home, ".local", "share"))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
		t.Errorf("the quick start did not end within 3 minutes")
	}
	serverLog, _ := os.ReadFile(filepath.Join(clone, "server.log"))
	if err != nil {
		t.Fatalf("the quick start failed: %v\n%s\nserver log:\n%s", err, out.String(), serverLog)
	}
	t.Logf("quick start output:\n%s", out.String())

	blocks := strings.Split(out.String(), "===== block ")
	if len(blocks) != len(qs.clients)+1 {
		t.Fatalf("%d blocks ran, want %d", len(blocks)-1, len(qs.clients))
	}
	if !strings.HasSuffix(blocks[1], "hello") {
		t.Errorf("the asset round trip printed %q, want it to end with the uploaded text", blocks[1])
	}
	last := blocks[len(blocks)-1]
	if !strings.Contains(last, "event: status") || !strings.Contains(last, `"status":"succeeded"`) {
		t.Errorf("the job's events show no success:\n%s", last)
	}
	checkInverted(t, filepath.Join(clone, "docs", "photo.png"), filepath.Join(clone, "inverted.png"))
}

// checkInverted checks that got is want with every channel inverted as
// ComfyUI's ImageInvert does.
func checkInverted(t *testing.T, wantPath, gotPath string) {
	t.Helper()
	decode := func(p string) image.Image {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		img, err := png.Decode(bufio.NewReader(f))
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		return img
	}
	src, got := decode(wantPath), decode(gotPath)
	if src.Bounds() != got.Bounds() {
		t.Fatalf("inverted.png is %v, the photo %v", got.Bounds(), src.Bounds())
	}
	b := src.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := src.At(x, y).RGBA()
			r2, g2, b2, _ := got.At(x, y).RGBA()
			for i, pair := range [][2]uint32{{r, r2}, {g, g2}, {bl, b2}} {
				if want := gateway.ComfyInvert(uint8(pair[0] >> 8)); uint8(pair[1]>>8) != want {
					t.Fatalf("inverted.png (%d, %d) channel %d = %d, want %d", x, y, i, pair[1]>>8, want)
				}
			}
		}
	}
}

// copyTracked copies the files git tracks under root (as they are in the
// working tree) to dir: what a fresh clone has, with this checkout's edits.
func copyTracked(t *testing.T, root, dir string) {
	t.Helper()
	list := exec.Command("git", "ls-files", "-z")
	list.Dir = root
	names, err := list.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(names), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		copyFile(t, src, dst, info.Mode().Perm())
	}
}

// shellQuote quotes s as one word for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// portInUse reports whether something accepts connections on addr.
func portInUse(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	c.Close()
	return true
}
