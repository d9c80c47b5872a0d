package packaging

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// imageFiles are the only files the image holds (directories aside).
var imageFiles = []string{
	"etc/comfygate/Caddyfile",
	"etc/group",
	"etc/passwd",
	"etc/ssl/certs/ca-certificates.crt",
	"usr/bin/comfygate",
}

// TestImage builds the Containerfile with buildah from a binary built
// first (its prebuilt stage: no registry), inspects the image (user,
// entrypoint, volume, labels, stop signal, its files and size), exports
// its root file system and runs the gateway from it with chroot, as the
// image's user and with the image's environment and command, in a network
// namespace of its own: the README's tour passes against it, and the
// gateway writes nowhere but /data. Skipped when buildah is not installed
// (tests/run installs it).
func TestImage(t *testing.T) {
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		t.Skip("buildah is not installed (apt-get install buildah; tests/run installs it): the image is not built or checked")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: buildah's storage and chroot into the image's root file system need root")
	}
	root := gateway.RepoRoot(t)
	clone := t.TempDir()
	copyTracked(t, root, clone)

	// The prebuilt stage's inputs: the binary built as the build stage
	// builds it, and this machine's CA bundle.
	containerfile, err := os.ReadFile(filepath.Join(clone, "Containerfile"))
	if err != nil {
		t.Fatal(err)
	}
	buildLine := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*) -o /out/comfygate (\./cmd/comfygate)$`).FindSubmatch(containerfile)
	if buildLine == nil {
		t.Fatal("the Containerfile's build stage has no `RUN CGO_ENABLED=0 go build … -o /out/comfygate ./cmd/comfygate`")
	}
	start := time.Now()
	build := exec.Command("bash", "-c", fmt.Sprintf("%s -o %s %s", buildLine[1], shellQuote(filepath.Join(clone, "comfygate")), buildLine[2]))
	build.Dir = clone
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", build.Args[2], err, out)
	}
	t.Logf("built the binary as the Containerfile does (%s) in %s", buildLine[1], time.Since(start).Round(time.Millisecond))
	copyFile(t, "/etc/ssl/certs/ca-certificates.crt", filepath.Join(clone, "ca-certificates.crt"), 0o644)

	tag := fmt.Sprintf("localhost/comfygate-test:%d-%d", os.Getpid(), time.Now().UnixNano())
	revision := strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	start = time.Now()
	existing := buildahContainers(t, buildah)
	t.Cleanup(func() { removeBuild(t, buildah, tag, existing) })
	runIn(t, clone, buildah, "build", "--quiet", "--build-arg", "BINARY_FROM=prebuilt",
		"--build-arg", "VERSION=v0.0.0-test", "--build-arg", "REVISION="+revision, "-t", tag, ".")
	t.Logf("built image %s in %s", tag, time.Since(start).Round(time.Millisecond))

	cfg := inspectImage(t, buildah, tag)
	checkImageConfig(t, cfg, revision)

	start = time.Now()
	rootfs := exportImage(t, buildah, tag)
	checkImageFiles(t, rootfs, clone)
	t.Logf("exported and checked its root file system in %s", time.Since(start).Round(time.Millisecond))

	// The tour, against the gateway run from the root file system as the
	// image runs it.
	readme, err := os.ReadFile(filepath.Join(clone, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	tour := readRecipe(t, readme, "quickstart")
	tour.server = imageCommand(cfg, rootfs)
	before := filesOutsideData(t, rootfs)
	// Root's own namespace, not a user namespace: the image's user must be
	// one the command can switch to.
	netns := privateNetwork(t, []string{"unshare", "-n"}, "127.0.0.1:8189", "127.0.0.1:2019")
	start = time.Now()
	blocks := tour.run(t, clone, nil, "", "http://127.0.0.1:8189/", netns...)
	checkTour(t, clone, blocks)
	t.Logf("the tour took %s", time.Since(start).Round(time.Millisecond))

	// It wrote its store and Caddy's data under /data, as the image's user,
	// and nothing elsewhere.
	for _, p := range []string{"data/comfygate/comfygate.db", "data/caddy"} {
		info, err := os.Stat(filepath.Join(rootfs, p))
		if err != nil {
			t.Errorf("after the tour: %v", err)
		} else if st := info.Sys().(*syscall.Stat_t); st.Uid != imageUID {
			t.Errorf("/%s is owned by uid %d, want %d", p, st.Uid, imageUID)
		}
	}
	if after := filesOutsideData(t, rootfs); !slices.Equal(before, after) {
		t.Errorf("the gateway changed the root file system outside /data: %v, then %v", before, after)
	}
}

// buildahContainers returns buildah's working containers: ID → image ID.
func buildahContainers(t *testing.T, buildah string) map[string]string {
	t.Helper()
	var list []struct {
		ID      string `json:"id"`
		ImageID string `json:"imageid"`
	}
	if err := json.Unmarshal([]byte(runIn(t, "", buildah, "containers", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	ids := map[string]string{}
	for _, c := range list {
		ids[c.ID] = c.ImageID
	}
	return ids
}

// removeBuild removes the image and what its build left: buildah 1.28
// keeps the working container of the stage that BINARY_FROM aliases, and
// that stage's image, after the build. Containers that were there before
// (the test's own are gone by now) are left alone.
func removeBuild(t *testing.T, buildah, tag string, before map[string]string) {
	_ = exec.Command(buildah, "rmi", "--force", tag).Run()
	for id, image := range buildahContainers(t, buildah) {
		if _, ok := before[id]; !ok {
			_ = exec.Command(buildah, "rm", id).Run()
			_ = exec.Command(buildah, "rmi", image).Run()
		}
	}
}

// imageConfig is the OCI image config that buildah inspect reports.
type imageConfig struct {
	User         string              `json:"User"`
	Env          []string            `json:"Env"`
	Entrypoint   []string            `json:"Entrypoint"`
	Cmd          []string            `json:"Cmd"`
	WorkingDir   string              `json:"WorkingDir"`
	Volumes      map[string]struct{} `json:"Volumes"`
	ExposedPorts map[string]struct{} `json:"ExposedPorts"`
	StopSignal   string              `json:"StopSignal"`
	Labels       map[string]string   `json:"Labels"`
}

func inspectImage(t *testing.T, buildah, tag string) imageConfig {
	t.Helper()
	var out struct {
		OCIv1 struct {
			Config imageConfig `json:"config"`
		} `json:"OCIv1"`
	}
	if err := json.Unmarshal([]byte(runIn(t, "", buildah, "inspect", "--type", "image", tag)), &out); err != nil {
		t.Fatal(err)
	}
	return out.OCIv1.Config
}

// checkImageConfig checks what the image says about how it runs.
func checkImageConfig(t *testing.T, cfg imageConfig, revision string) {
	t.Helper()
	if cfg.User != fmt.Sprintf("%d:%d", imageUID, imageUID) {
		t.Errorf("image user %q, want %d:%d (non-root, numeric so that runAsNonRoot can check it)", cfg.User, imageUID, imageUID)
	}
	if !slices.Equal(cfg.Entrypoint, []string{"/usr/bin/comfygate"}) || !slices.Equal(cfg.Cmd, []string{"run", "--config", "/etc/comfygate/Caddyfile"}) {
		t.Errorf("entrypoint %q, cmd %q", cfg.Entrypoint, cfg.Cmd)
	}
	if _, ok := cfg.Volumes["/data"]; !ok || len(cfg.Volumes) != 1 || cfg.WorkingDir != "/data" {
		t.Errorf("volumes %v, working directory %q: want /data", cfg.Volumes, cfg.WorkingDir)
	}
	if _, ok := cfg.ExposedPorts["8189/tcp"]; !ok {
		t.Errorf("exposed ports %v, want 8189/tcp (the default config's)", cfg.ExposedPorts)
	}
	if cfg.StopSignal != "SIGTERM" {
		t.Errorf("stop signal %q, want SIGTERM (Caddy's graceful stop)", cfg.StopSignal)
	}
	for _, e := range []string{"XDG_DATA_HOME=/data", "XDG_CONFIG_HOME=/data"} {
		if !slices.Contains(cfg.Env, e) {
			t.Errorf("env %q lacks %s (Caddy's storage on the volume)", cfg.Env, e)
		}
	}
	for k, v := range map[string]string{
		"org.opencontainers.image.version":  "v0.0.0-test",
		"org.opencontainers.image.revision": revision,
		"org.opencontainers.image.source":   "https://github.com/comfygate/comfygate",
		"org.opencontainers.image.title":    "comfygate",
	} {
		if cfg.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, cfg.Labels[k], v)
		}
	}
}

// exportImage copies the image's root file system (a working container's,
// through buildah mount) into a directory, owners and modes kept.
func exportImage(t *testing.T, buildah, tag string) string {
	t.Helper()
	ctr := strings.TrimSpace(runIn(t, "", buildah, "from", "--quiet", "--pull-never", tag))
	defer func() { _ = exec.Command(buildah, "rm", ctr).Run() }()
	mnt := strings.TrimSpace(runIn(t, "", buildah, "mount", ctr))
	defer func() { _ = exec.Command(buildah, "umount", ctr).Run() }()
	rootfs := t.TempDir()
	runIn(t, "", "bash", "-c", fmt.Sprintf("tar -C %s -cf - . | tar -C %s --numeric-owner -xpf -", shellQuote(mnt), shellQuote(rootfs)))
	return rootfs
}

// checkImageFiles checks the image's files: exactly imageFiles, the binary
// static, stripped and the one built, the default config the container
// example, /data the user's; and reports the sizes.
func checkImageFiles(t *testing.T, rootfs, context string) {
	t.Helper()
	var files []string
	var size int64
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(rootfs, path)
		files = append(files, rel)
		info, err := d.Info()
		size += info.Size()
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, imageFiles) {
		t.Errorf("the image holds %v, want exactly %v", files, imageFiles)
	}
	bin := filepath.Join(rootfs, "usr", "bin", "comfygate")
	if !sameContent(t, bin, filepath.Join(context, "comfygate")) {
		t.Error("/usr/bin/comfygate is not the binary built")
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Error("/usr/bin/comfygate is dynamically linked (it names an interpreter); scratch has no libc")
		}
	}
	if f.Section(".symtab") != nil {
		t.Error("/usr/bin/comfygate is not stripped (it has a symbol table)")
	}
	for file, want := range map[string]string{
		"etc/comfygate/Caddyfile": filepath.Join(context, "caddyfile-examples", "container.Caddyfile"),
		"etc/passwd":              filepath.Join(context, "deploy", "container", "passwd"),
	} {
		if !sameContent(t, filepath.Join(rootfs, file), want) {
			t.Errorf("/%s is not %s", file, want)
		}
	}
	info, err := os.Stat(filepath.Join(rootfs, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if st := info.Sys().(*syscall.Stat_t); st.Uid != imageUID || st.Gid != imageUID {
		t.Errorf("/data is owned by %d:%d, want the image's user %d:%d", st.Uid, st.Gid, imageUID, imageUID)
	}
	binInfo, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	if rest := size - binInfo.Size(); rest > 1<<20 {
		t.Errorf("the image holds %d bytes besides the binary, want little else", rest)
	}
	if !testing.Verbose() {
		t.Logf("image root file system: %d files, %.1f MB (with -v: its gzipped size)", len(files), float64(size)/1e6)
		return
	}
	t.Logf("image root file system: %d files, %.1f MB; %.1f MB as a gzipped tar (a layer)",
		len(files), float64(size)/1e6, float64(gzippedTarSize(t, rootfs))/1e6)
}

// gzippedTarSize is the size of rootfs as a gzipped tar, as a registry
// stores a layer.
func gzippedTarSize(t *testing.T, rootfs string) int64 {
	t.Helper()
	var n countingWriter
	gz := gzip.NewWriter(&n)
	tw := tar.NewWriter(gz)
	if err := tw.AddFS(os.DirFS(rootfs)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return int64(n)
}

type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// imageCommand is the shell command that runs the image's command from
// rootfs as the image would: its environment only, its working directory,
// its user (unshare --root chroots; it runs as root, so it can switch).
func imageCommand(cfg imageConfig, rootfs string) string {
	uid, gid, _ := strings.Cut(cfg.User, ":")
	args := []string{"exec", "env", "-i"}
	args = append(args, cfg.Env...)
	args = append(args, "unshare", "--root="+rootfs, "--wd="+cfg.WorkingDir, "--setuid="+uid, "--setgid="+gid, "--")
	args = append(args, append(cfg.Entrypoint, cfg.Cmd...)...)
	for i, a := range args {
		args[i] = shellQuote(a)
	}
	return strings.Join(args, " ") + "\n"
}

// filesOutsideData lists rootfs's paths outside /data.
func filesOutsideData(t *testing.T, rootfs string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(rootfs, func(path string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(rootfs, path)
		if rel == "data" {
			return fs.SkipDir
		}
		paths = append(paths, rel)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

// sameContent reports whether two files hold the same bytes.
func sameContent(t *testing.T, a, b string) bool {
	t.Helper()
	da, err := os.ReadFile(a)
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.ReadFile(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(da, db)
}

// runIn runs a command in dir and returns its standard output, failing the
// test when it fails.
func runIn(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	return output(t, cmd)
}

// output runs cmd and returns its standard output, failing the test with
// its standard error when it fails.
func output(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v\n%s%s", strings.Join(cmd.Args, " "), err, out, stderr.Bytes())
	}
	return string(out)
}

// TestContainerExample checks that the image's default config is the
// self-hosted example with only what a container needs changed: it
// listens on every interface (the container's own; publishing decides who
// reaches it) instead of 127.0.0.1, keeps its store under the volume, and
// names the admin endpoint's loopback address (scratch has no /etc/hosts
// for localhost; a runtime usually mounts one, but need not).
func TestContainerExample(t *testing.T) {
	examples := filepath.Join(gateway.RepoRoot(t), "caddyfile-examples")
	_, selfHosted := adapt(t, filepath.Join(examples, "self-hosted.Caddyfile"))
	_, container := adapt(t, filepath.Join(examples, "container.Caddyfile"))
	want := strings.NewReplacer(`{"apps":`, `{"admin":{"listen":"127.0.0.1:2019"},"apps":`,
		`"listen":["127.0.0.1:8189"]`, `"listen":[":8189"]`,
		`"dir":"./data"`, `"dir":"/data/comfygate"`).Replace(string(selfHosted))
	if string(container) != want {
		t.Errorf("container.Caddyfile adapts to\n%s\nwant the self-hosted example's with the admin on 127.0.0.1, :8189 and /data/comfygate:\n%s", container, want)
	}
}
