package modproxy

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
)

// gitRepo makes a git repository in a temp dir with files committed at a
// fixed time, and returns its path.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"init", "-q"},
		{"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-q", "-m", "one"},
	} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// TestPublishCommittedTree publishes a commit of a repository whose working
// tree has an untracked file and an uncommitted edit, and fetches it back
// with the go command from the proxy alone.
func TestPublishCommittedTree(t *testing.T) {
	repo := gitRepo(t, map[string]string{
		"go.mod":      "module example.com/demo\n\ngo 1.22\n",
		"demo.go":     "package demo\n\nconst Answer = 42\n",
		"sub/file.go": "package sub\n",
	})
	if err := os.WriteFile(filepath.Join(repo, "untracked.go"), []byte("package demo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "demo.go"), []byte("package demo\n\nconst Answer = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	proxy := t.TempDir()
	mv, err := Publish(repo, "HEAD", proxy)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := git(repo, "rev-parse", "HEAD")
	if err != nil {
		t.Fatal(err)
	}
	want := "v0.0.0-20260102030405-" + commit[:12]
	if mv.Path != "example.com/demo" || mv.Version != want {
		t.Fatalf("Publish = %v, want example.com/demo@%s", mv, want)
	}
	// Publishing again keeps one entry in the list.
	if _, err := Publish(repo, "HEAD", proxy); err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(proxy, "example.com", "demo", "@v", "list"))
	if err != nil || string(list) != want+"\n" {
		t.Errorf("list = %q, %v; want %q", list, err, want+"\n")
	}

	// The go command fetches it from the proxy with no other source.
	cmd := exec.Command("go", "mod", "download", "-json", "-modcacherw", mv.Path+"@"+mv.Version)
	cmd.Dir = t.TempDir()
	cache := t.TempDir()
	cmd.Env = append(os.Environ(), "GOPROXY=file://"+proxy, "GONOSUMDB="+mv.Path, "GOMODCACHE="+cache, "GOFLAGS=-modcacherw")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod download: %v\n%s", err, out)
	}
	var dl struct{ Dir, Version, Error string }
	if err := json.Unmarshal(out, &dl); err != nil || dl.Error != "" || dl.Version != want {
		t.Fatalf("go mod download: %s (%v)", out, err)
	}
	got, err := os.ReadFile(filepath.Join(dl.Dir, "demo.go"))
	if err != nil || !strings.Contains(string(got), "Answer = 42") {
		t.Errorf("demo.go in the module = %q, %v; want the committed content", got, err)
	}
	if _, err := os.Stat(filepath.Join(dl.Dir, "sub", "file.go")); err != nil {
		t.Errorf("sub/file.go missing from the module: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dl.Dir, "untracked.go")); err == nil {
		t.Error("an untracked file was published")
	}
}

func TestPublishErrors(t *testing.T) {
	noModule := gitRepo(t, map[string]string{"README": "no go.mod here\n"})
	tests := []struct {
		name, repo, rev, want string
	}{
		{"not a git checkout", t.TempDir(), "HEAD", "git rev-parse"},
		{"unknown revision", noModule, "no-such-branch", "git rev-parse"},
		{"no go.mod", noModule, "HEAD", "go.mod at"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Publish(tt.repo, tt.rev, t.TempDir())
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Publish error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestWriteVersionEscapesPaths(t *testing.T) {
	dir := t.TempDir()
	mv := module.Version{Path: "github.com/Upper/Case", Version: "v1.0.0"}
	if err := writeVersion(dir, mv, map[string][]byte{".mod": []byte("module github.com/Upper/Case\n")}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "github.com", "!upper", "!case", "@v", "v1.0.0.mod")); err != nil {
		t.Errorf("escaped path not written: %v", err)
	}
}
