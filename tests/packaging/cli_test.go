package packaging

import (
	"bytes"
	"debug/buildinfo"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/internal/version"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestCommandLine runs the comfygate binary's help, version and build-info,
// which must introduce it as comfygate with what its build recorded, and
// the commands that would download a stock Caddy over it, which must
// refuse and leave it as it was.
func TestCommandLine(t *testing.T) {
	bin := gateway.Binary(t)
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	line := version.FromBuildInfo(bi).String()

	help := run(t, bin, "--help")
	for _, want := range []string{"comfygate [command]", "$ comfygate run", "api-key", "version "} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q:\n%s", want, help)
		}
	}
	for _, unwanted := range []string{"caddy [command]", "$ caddy", "upgrade", "add-package", "remove-package"} {
		if strings.Contains(help, unwanted) {
			t.Errorf("--help shows %q:\n%s", unwanted, help)
		}
	}
	if usage := run(t, bin, "run", "--help"); !strings.Contains(usage, "comfygate run [--config <path>") {
		t.Errorf("run --help has no comfygate usage line:\n%s", usage)
	}
	for _, args := range [][]string{{"version"}, {"--version"}} {
		if got := strings.TrimSpace(run(t, bin, args...)); got != line {
			t.Errorf("%v = %q, want %q (from the binary's build information)", args, got, line)
		}
	}
	if !strings.HasPrefix(line, "comfygate ") || !strings.Contains(line, " caddy v2.") {
		t.Errorf("version line %q names neither comfygate nor its Caddy", line)
	}
	info := run(t, bin, "build-info")
	for _, want := range []string{line + "\n", "path\tgithub.com/comfygate/comfygate/cmd/comfygate\n", "mod\tgithub.com/comfygate/comfygate\t"} {
		if !strings.Contains(info, want) {
			t.Errorf("build-info lacks %q:\n%s", want, info)
		}
	}

	// The refused commands, on a copy so that a failure cannot touch the
	// binary the other tests use.
	dir := t.TempDir()
	cp := filepath.Join(dir, "comfygate")
	copyFile(t, bin, cp, 0o755)
	before, _ := os.ReadFile(cp)
	for _, args := range [][]string{
		{"upgrade"},
		{"upgrade", "--keep-backup"},
		{"add-package", "github.com/mholt/caddy-l4"},
		{"remove-package", "github.com/comfygate/comfygate"},
	} {
		cmd := exec.Command(cp, args...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Errorf("%v: %v, want exit status 1", args, err)
		}
		if !strings.Contains(stderr.String(), args[0]+" is not available in comfygate") {
			t.Errorf("%v said %q, want the refusal", args, stderr.String())
		}
	}
	after, _ := os.ReadFile(cp)
	entries, _ := os.ReadDir(dir)
	if !bytes.Equal(before, after) || len(entries) != 1 {
		t.Errorf("the binary changed or a file appeared beside it (%d entries)", len(entries))
	}
}

// TestStorageCommandsHelp (issue 26, item 8): `comfygate help` names
// comfygate's own commands, and the help of each command that opens a
// config's storage says that it needs what run needs: the same config,
// working directory and environment.
func TestStorageCommandsHelp(t *testing.T) {
	bin := gateway.Binary(t)
	help := run(t, bin, "help")
	for _, want := range []string{"comfygate's own commands: api-key, credits and deployment", "COMFYGATE_POSTGRES_DSN"} {
		if !strings.Contains(help, want) {
			t.Errorf("help lacks %q:\n%s", want, help)
		}
	}
	for _, name := range []string{"api-key", "credits", "deployment"} {
		for _, args := range [][]string{{name, "--help"}, {"help", name}} {
			out := run(t, bin, args...)
			for _, want := range []string{"comfygate " + name + " --config <path>", "as run does",
				"same working directory", "same environment", "COMFYGATE_POSTGRES_DSN"} {
				if !strings.Contains(out, want) {
					t.Errorf("%v lacks %q:\n%s", args, want, out)
				}
			}
		}
	}
}

// TestVersionOfCheckoutBuild builds cmd/comfygate in a clone of this
// checkout at HEAD with VCS stamping on (Go does not stamp from a git
// worktree, and this machine's go env turns stamping off) and checks that
// version names the commit.
func TestVersionOfCheckoutBuild(t *testing.T) {
	root := gateway.RepoRoot(t)
	head := strings.TrimSpace(git(t, root, "rev-parse", "HEAD"))
	clone := filepath.Join(t.TempDir(), "comfygate")
	git(t, root, "clone", "--quiet", "--shared", "--no-checkout", root, clone)
	git(t, clone, "checkout", "--quiet", "--detach", head)

	bin := filepath.Join(t.TempDir(), "comfygate")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/comfygate")
	build.Dir = clone
	build.Env = append(os.Environ(), "GOWORK=off")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got := run(t, bin, "version")
	if !strings.Contains(got, "(commit "+head+", ") || strings.Contains(got, "modified") {
		t.Errorf("version = %q, want commit %s of a clean tree", got, head)
	}
	if !strings.Contains(got, "-"+head[:12]+" ") {
		t.Errorf("version = %q, want the pseudo-version of %s", got, head[:12])
	}
}

// git runs git in dir and returns its output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}
