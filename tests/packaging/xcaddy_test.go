// Package packaging tests comfygate as it is shipped: built as a plugin of
// an ordinary Caddy with xcaddy, the comfygate binary's command line,
// the systemd unit, and the README's quick start as a new user runs it.
package packaging

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/module"

	"github.com/comfygate/comfygate/internal/modproxy"
	"github.com/comfygate/comfygate/tests/gateway"
)

// The pinned tools of the plugin build. xcaddy v0.4.5 is the newest
// release; caddy-l4 v0.1.2 (the layer4 app) requires Caddy v2.11.4, so it
// does not move the build off the Caddy version xcaddy.json names.
const (
	xcaddyModule = "github.com/caddyserver/xcaddy"
	xcaddyPin    = "v0.4.5"
	otherPlugin  = "github.com/mholt/caddy-l4@v0.1.2"
)

// TestXcaddyPluginBuild builds Caddy with xcaddy from comfygate's module
// (the committed tree of this checkout, published as a pseudo-version in a
// file-based module proxy placed before the usual one) and one other public
// plugin, then checks that the binary lists every comfygate module at that
// version and serves the self-hosted example: an asset round trip and a
// job on the built-in executor.
func TestXcaddyPluginBuild(t *testing.T) {
	root := gateway.RepoRoot(t)
	m := readManifest(t, root)
	xcaddy := installXcaddy(t)

	proxy := t.TempDir()
	mv, err := modproxy.Publish(root, "HEAD", proxy)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("building %s@%s (the committed tree at HEAD; uncommitted changes are not in it)", mv.Path, mv.Version)
	t.Cleanup(func() { forgetModule(t, mv) })

	// xcaddy.json's build command, for this version, plus the other plugin.
	args := strings.Fields(strings.ReplaceAll(m.Build, "<version>", mv.Version))
	if len(args) < 3 || args[0] != "xcaddy" || args[1] != "build" || args[2] != m.CaddyVersion || !slices.Contains(args, mv.Path+"@"+mv.Version) {
		t.Fatalf("xcaddy.json build %q is not an xcaddy build of Caddy %s with %s@<version>", m.Build, m.CaddyVersion, mv.Path)
	}
	out := filepath.Join(t.TempDir(), "caddy")
	build := exec.CommandContext(deadline(t), xcaddy, append(args[1:], "--with", otherPlugin, "--output", out)...)
	build.Dir = t.TempDir()
	build.Env = append(os.Environ(),
		"GOPROXY=file://"+proxy+","+goEnv(t, "GOPROXY"),
		"GONOSUMDB="+mv.Path, // the checksum database has never seen this version
		"GOWORK=off",
		"TMPDIR="+t.TempDir(), // xcaddy's build module
		// xcaddy's default flags add -trimpath and build tags, which would
		// compile all of Caddy again instead of sharing the build cache with
		// tests/run's go build; the build itself is the same.
		"XCADDY_GO_BUILD_FLAGS=-ldflags '-w -s'",
	)
	started := time.Now()
	if log, err := build.CombinedOutput(); err != nil {
		t.Fatalf("xcaddy build: %v\n%s", err, log)
	}
	t.Logf("xcaddy build took %s", time.Since(started).Round(time.Second))

	// Every comfygate module, at the published version, and the other plugin.
	listed := run(t, out, "list-modules", "--versions", "--skip-standard")
	var ours []string
	for _, line := range strings.Split(listed, "\n") {
		if id, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok && v == mv.Version {
			ours = append(ours, id)
		}
	}
	want := slices.Sorted(slices.Values(m.Modules))
	if slices.Sort(ours); !slices.Equal(ours, want) {
		t.Errorf("modules at %s: %v, want xcaddy.json's %v\n%s", mv.Version, ours, want, listed)
	}
	if !strings.Contains(listed, "\nlayer4 v0.1.2\n") {
		t.Errorf("the other plugin's layer4 app is not listed:\n%s", listed)
	}
	if v := run(t, out, "version"); !strings.HasPrefix(v, m.CaddyVersion+" ") {
		t.Errorf("caddy version %q, want %s (the plugins must not move Caddy)", v, m.CaddyVersion)
	}
	if bi := run(t, out, "build-info"); !strings.Contains(bi, "dep\t"+mv.Path+"\t"+mv.Version+"\t") {
		t.Errorf("build-info does not name %s@%s:\n%s", mv.Path, mv.Version, bi)
	}

	// The self-hosted example, as a user runs it.
	g := gateway.Start(t, gateway.SelfHostedExample(t), gateway.Options{Binary: out})
	rev, _ := module.PseudoVersionRev(mv.Version)
	if wantLog := fmt.Sprintf("comfygate %s (commit %s", mv.Version, rev); !strings.Contains(g.Logs(), wantLog) {
		t.Errorf("the app's start log does not say %q:\n%s", wantLog, g.Logs())
	}
	png := gateway.GradientPNG(t, 16)
	asset := uploadAsset(t, g.URL, "photo.png", png)
	if r := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/assets/"+asset+"/content", nil, nil); r.Status != http.StatusOK || !bytes.Equal(r.Body, png) {
		t.Fatalf("download: %d, %d bytes; want 200 and the %d uploaded bytes", r.Status, len(r.Body), len(png))
	}
	job := submitInvert(t, g.URL, "photo.png")
	done := gateway.WaitJob(t, g.URL, job, time.Minute, gateway.Terminal)
	if done["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", done["status"], done["error"])
	}
}

// manifest is the part of xcaddy.json this test needs.
type manifest struct {
	CaddyVersion string   `json:"caddy_version"`
	Modules      []string `json:"modules"`
	Build        string   `json:"build"`
}

func readManifest(t *testing.T, root string) manifest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "xcaddy.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil || m.CaddyVersion == "" || len(m.Modules) == 0 || m.Build == "" {
		t.Fatalf("xcaddy.json: %v (%+v)", err, m)
	}
	return m
}

// installXcaddy returns the pinned xcaddy, installing it from the module
// proxy into the user cache directory on first use.
func installXcaddy(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "comfygate-tests", "xcaddy-"+xcaddyPin)
	bin := filepath.Join(dir, "xcaddy")
	if _, err := os.Stat(bin); err == nil {
		return bin
	}
	cmd := exec.Command("go", "install", xcaddyModule+"/cmd/xcaddy@"+xcaddyPin)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("installing xcaddy %s: %v\n%s", xcaddyPin, err, out)
	}
	return bin
}

// forgetModule removes the published version from the module cache, where
// the build put it, so that runs at new commits do not pile up copies.
func forgetModule(t *testing.T, mv module.Version) {
	modcache := goEnv(t, "GOMODCACHE")
	escPath, err1 := module.EscapePath(mv.Path)
	escVersion, err2 := module.EscapeVersion(mv.Version)
	if err1 != nil || err2 != nil || modcache == "" {
		return
	}
	extracted := filepath.Join(modcache, filepath.FromSlash(escPath)+"@"+escVersion)
	// The module cache is read-only; make it writable to remove it.
	_ = filepath.WalkDir(extracted, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	if err := os.RemoveAll(extracted); err != nil {
		t.Logf("removing %s: %v", extracted, err)
	}
	downloads, _ := filepath.Glob(filepath.Join(modcache, "cache", "download", filepath.FromSlash(escPath), "@v", escVersion+".*"))
	for _, f := range downloads {
		_ = os.Remove(f)
	}
}

func goEnv(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		t.Fatalf("go env %s: %v", name, err)
	}
	return strings.TrimSpace(string(out))
}

// deadline is a context that ends a minute before the test binary's
// deadline, so that a hung build fails this test with its output.
func deadline(t *testing.T) context.Context {
	ctx := context.Background()
	if d, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, d.Add(-time.Minute))
		t.Cleanup(cancel)
	}
	return ctx
}

// run runs bin with args and returns its standard output.
func run(t *testing.T, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s%s", filepath.Base(bin), args, err, out, stderr.Bytes())
	}
	return string(out)
}

// uploadAsset uploads data as an image/png asset and returns its id.
func uploadAsset(t *testing.T, base, filePath string, data []byte) string {
	t.Helper()
	return createdID(t, "upload", gateway.Upload(t, http.DefaultClient, base, data, filePath, "image/png", nil))
}

// submitInvert submits LoadImage(image) → ImageInvert → SaveImage and
// returns the job id.
func submitInvert(t *testing.T, base, image string) string {
	t.Helper()
	wf := map[string]any{"workflow": map[string]any{
		"1": map[string]any{"class_type": "LoadImage", "inputs": map[string]any{"image": image}},
		"2": map[string]any{"class_type": "ImageInvert", "inputs": map[string]any{"image": []any{"1", 0}}},
		"3": map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "inverted", "images": []any{"2", 0}}},
	}}
	raw, _ := json.Marshal(wf)
	return createdID(t, "submit", gateway.Do(t, http.MethodPost, base+"/api/v2/jobs", bytes.NewReader(raw), map[string]string{"Content-Type": "application/json"}))
}

// createdID is the id of what a 201 response created.
func createdID(t *testing.T, what string, r gateway.Response) string {
	t.Helper()
	if r.Status != http.StatusCreated {
		t.Fatalf("%s: %d %s", what, r.Status, r.Body)
	}
	id, _ := r.JSON(t)["id"].(string)
	if id == "" {
		t.Fatalf("%s answered no id: %s", what, r.Body)
	}
	return id
}
