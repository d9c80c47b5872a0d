package packaging

import (
	"bufio"
	"bytes"
	"fmt"
	"image"
	"image/png"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// recipe is a documented recipe that a test runs as written: the blocks marked
// <!-- name: env --> (the reader's own settings, which the test supplies),
// <!-- name: server --> (the command a reader leaves running) and
// <!-- name --> (pasted into another terminal, in order).
type recipe struct {
	env, server string
	clients     []string
}

// readRecipe extracts the ```sh blocks of a page (README.md, docs/…)
// marked for name.
func readRecipe(t *testing.T, page []byte, name string) recipe {
	t.Helper()
	marker := regexp.MustCompile(`^<!-- ` + regexp.QuoteMeta(name) + `(?:: (server|env))?\b.*-->$`)
	var r recipe
	lines := strings.Split(string(page), "\n")
	for i := 0; i < len(lines); i++ {
		m := marker.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || lines[i+1] != "```sh" {
			t.Fatalf("line %d: a %s marker must be followed by a ```sh block", i+1, name)
		}
		var block []string
		for i += 2; i < len(lines) && lines[i] != "```"; i++ {
			block = append(block, lines[i])
		}
		text := strings.Join(block, "\n") + "\n"
		switch m[1] {
		case "server":
			if r.server != "" {
				t.Fatalf("two %s server blocks", name)
			}
			r.server = text
		case "env":
			r.env += text
		default:
			r.clients = append(r.clients, text)
		}
	}
	if r.server == "" || len(r.clients) == 0 {
		t.Fatalf("no %s recipe marked for this test (server block %q, %d other blocks)", name, r.server, len(r.clients))
	}
	return r
}

// run runs the recipe in dir with bash: prelude first (the test's own
// settings, in place of the env block), the server block in the background
// until ready answers, then each other block in a shell of its own as a
// reader pastes it. It returns each block's output, failing the test when
// a block fails, and stops the server. With a netns command (unshare -rn,
// or unshare -n as root) the script runs in a network namespace of its own,
// with only a loopback; with none, on the host's network.
func (r recipe) run(t *testing.T, dir string, env []string, prelude, ready string, netns ...string) []string {
	t.Helper()
	var script strings.Builder
	script.WriteString("set -u\n" + prelude)
	script.WriteString("bash -c " + shellQuote(r.server) + " >server.log 2>&1 &\nserver=$!\n")
	script.WriteString(`for _ in $(seq 1 150); do
	curl -sk -o /dev/null ` + ready + ` && break
	kill -0 $server 2>/dev/null || { echo "the server exited"; exit 1; }
	sleep 0.2
done
status=0
`)
	for i, block := range r.clients {
		fmt.Fprintf(&script, "echo '===== block %d'\n", i+1)
		script.WriteString("bash -e -c " + shellQuote(block) + " || { status=$?; echo \"===== block failed: $status\"; }\n")
	}
	script.WriteString("kill -TERM $server; wait $server\nexit $status\n")
	if err := os.WriteFile(filepath.Join(dir, ".recipe.sh"), []byte(script.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"bash", ".recipe.sh"}
	if len(netns) > 0 {
		args = append(netns, "bash", "-c", "ip link set lo up && exec bash .recipe.sh")
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Dir = dir
	home := t.TempDir() // Caddy's autosave, data and local CA go here, not in the user's home
	cmd.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"XDG_DATA_HOME="+filepath.Join(home, ".local", "share"))
	cmd.Env = append(cmd.Env, env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
		t.Errorf("the recipe did not end within 3 minutes")
	}
	serverLog, _ := os.ReadFile(filepath.Join(dir, "server.log"))
	if err != nil {
		t.Fatalf("the recipe failed: %v\n%s\nserver log:\n%s", err, out.String(), serverLog)
	}
	t.Logf("recipe output:\n%s", out.String())
	blocks := strings.Split(out.String(), "===== block ")
	if len(blocks) != len(r.clients)+1 {
		t.Fatalf("%d blocks ran, want %d", len(blocks)-1, len(r.clients))
	}
	return blocks[1:]
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
	clone := t.TempDir()
	copyTracked(t, gateway.RepoRoot(t), clone)
	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	qs := readRecipe(t, readme, "quickstart")
	goFunc := `go() {
	if [ "$1" = run ] && [ "$2" = ./cmd/comfygate ]; then shift 2; exec "$COMFYGATE_QUICKSTART_BIN" "$@"; fi
	echo "the quick start runs go $*, which this test does not stand for" >&2; return 1
}
export -f go
`
	netns := privateNetwork(t, []string{"unshare", "-rn"}, "127.0.0.1:8189", "127.0.0.1:2019")
	blocks := qs.run(t, clone, []string{"COMFYGATE_QUICKSTART_BIN=" + bin}, goFunc, "http://127.0.0.1:8189/", netns...)
	checkTour(t, clone, blocks)
}

// checkTour checks what the README's tour printed and saved in dir: the
// uploaded text back, the job's success in its events, and inverted.png
// the photo inverted.
func checkTour(t *testing.T, dir string, blocks []string) {
	t.Helper()
	if !strings.HasSuffix(blocks[0], "hello") {
		t.Errorf("the asset round trip printed %q, want it to end with the uploaded text", blocks[0])
	}
	last := blocks[len(blocks)-1]
	if !strings.Contains(last, "event: status") || !strings.Contains(last, `"status":"succeeded"`) {
		t.Errorf("the job's events show no success:\n%s", last)
	}
	checkInverted(t, filepath.Join(dir, "docs", "photo.png"), filepath.Join(dir, "inverted.png"))
}

// TestServerlessTrial (issue 26, item 8) runs docs/serverless.md's recipe
// for trying the serverless example on one machine, as written, against the
// real binary (on PATH as comfygate), the test's Postgres schema and Redis:
// the recipe's env block names exactly the variables the test supplies.
// A deployment created with the CLI must answer its key's requests by
// prefix, by Host header over HTTP, and over HTTPS with a certificate of
// Caddy's local CA, issued on demand for its host.
func TestServerlessTrial(t *testing.T) {
	bin := gateway.Binary(t)
	clone := t.TempDir()
	copyTracked(t, gateway.RepoRoot(t), clone)
	page, err := os.ReadFile(filepath.Join(clone, "docs", "serverless.md"))
	if err != nil {
		t.Fatal(err)
	}
	r := readRecipe(t, page, "serverless-trial")
	binDir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(binDir, "comfygate")); err != nil {
		t.Fatal(err)
	}
	ports := distinctFreePorts(t, 3)
	settings := map[string]string{
		"COMFYGATE_POSTGRES_DSN":   pgtest.DSN(t),
		"COMFYGATE_REDIS_URL":      pgtest.RedisURL(t),
		"COMFYGATE_BLOB_DIR":       filepath.Join(clone, "data", "blobs"),
		"COMFYGATE_HTTP_PORT":      fmt.Sprint(ports[0]),
		"COMFYGATE_HTTPS_PORT":     fmt.Sprint(ports[1]),
		"COMFYGATE_DEPLOYMENT_TLS": "local",
	}
	var named []string
	for _, m := range regexp.MustCompile(`(?m)^export (.*)$`).FindAllStringSubmatch(r.env, -1) {
		for _, a := range regexp.MustCompile(`\b([A-Z][A-Z0-9_]*)=`).FindAllStringSubmatch(strings.SplitN(m[1], "#", 2)[0], -1) {
			named = append(named, a[1])
		}
	}
	var want []string
	var env strings.Builder
	for k, v := range settings {
		want = append(want, k)
		fmt.Fprintf(&env, "export %s=%s\n", k, shellQuote(v))
	}
	slices.Sort(named)
	slices.Sort(want)
	if !slices.Equal(named, want) {
		t.Fatalf("the recipe's env block sets %v, want %v", named, want)
	}
	// Not in the recipe: Caddy's admin endpoint off its default port, which
	// another Caddy on this machine may hold.
	fmt.Fprintf(&env, "export CADDY_ADMIN=127.0.0.1:%d\nexport PATH=%s\n", ports[2], shellQuote(binDir+":"+os.Getenv("PATH")))

	blocks := r.run(t, clone, nil, env.String(), fmt.Sprintf("http://127.0.0.1:%d/", ports[0]))
	all := strings.Join(blocks, "")
	if n := strings.Count(all, `{"jobs":[]}`); n != 3 {
		t.Errorf("the recipe's three requests (prefix, Host header, HTTPS) answered %d job lists, want 3", n)
	}
}

// distinctFreePorts returns n free ports, all different.
func distinctFreePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	for len(ports) < n {
		if p := gateway.FreePort(t); !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
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
		copyFile(t, src, filepath.Join(dir, name), info.Mode().Perm())
	}
}

// shellQuote quotes s as one word for bash.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// privateNetwork returns netns (a command prefix such as unshare -rn) when
// it can make a network namespace here, so that a recipe's fixed ports
// cannot meet another gateway on this machine; else nil, for the host's
// network, once it has checked that the ports are free there.
func privateNetwork(t *testing.T, netns []string, addrs ...string) []string {
	t.Helper()
	err := exec.Command(netns[0], append(netns[1:], "ip", "link", "set", "lo", "up")...).Run()
	if err == nil {
		return netns
	}
	t.Logf("%s is not allowed here (%v): running on the host's network", strings.Join(netns, " "), err)
	for _, addr := range addrs {
		if portInUse(addr) {
			t.Fatalf("%s is in use and no network namespace can be made: the recipe needs it", addr)
		}
	}
	return nil
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
