// Package modproxy publishes a commit of a git checkout of a Go module as a
// version in a file-based Go module proxy (GOPROXY=file://<dir>), so that
// tools that fetch modules by version — xcaddy — can build a checkout that
// is not published anywhere. The version is the pseudo-version the go
// command would give that commit: v0.0.0-<commit time>-<12-hex commit>.
package modproxy

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// Publish writes the tree of rev (a commit, branch or tag; "HEAD" for the
// checked-out commit) of the git checkout at repo into the proxy directory
// dir, as <module path>@<pseudo-version>, and returns that module version.
// Only committed files are published: untracked and modified files in the
// working tree are not. Publishing the same commit again rewrites the same
// files.
func Publish(repo, rev, dir string) (module.Version, error) {
	commit, err := git(repo, "rev-parse", "--verify", rev+"^{commit}")
	if err != nil {
		return module.Version{}, err
	}
	commit = strings.TrimSpace(commit)
	unix, err := git(repo, "show", "-s", "--format=%ct", commit)
	if err != nil {
		return module.Version{}, err
	}
	secs, err := strconv.ParseInt(strings.TrimSpace(unix), 10, 64)
	if err != nil {
		return module.Version{}, fmt.Errorf("commit time of %s: %w", commit, err)
	}
	when := time.Unix(secs, 0).UTC()
	gomod, err := git(repo, "show", commit+":go.mod")
	if err != nil {
		return module.Version{}, fmt.Errorf("go.mod at %s: %w", commit, err)
	}
	path := modfile.ModulePath([]byte(gomod))
	if path == "" {
		return module.Version{}, fmt.Errorf("go.mod at %s names no module", commit)
	}
	mv := module.Version{Path: path, Version: module.PseudoVersion("", "", when, commit[:12])}

	archive, err := gitArchive(repo, commit)
	if err != nil {
		return module.Version{}, err
	}
	var zipped bytes.Buffer
	if err := modzip.Create(&zipped, mv, archive); err != nil {
		return module.Version{}, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{mv.Version, when})
	if err != nil {
		return module.Version{}, err
	}
	return mv, writeVersion(dir, mv, map[string][]byte{
		".info": info,
		".mod":  []byte(gomod),
		".zip":  zipped.Bytes(),
	})
}

// writeVersion writes one version's files into the proxy layout,
// <dir>/<escaped path>/@v/<version><ext>, and adds it to the list file.
func writeVersion(dir string, mv module.Version, files map[string][]byte) error {
	escPath, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	escVersion, err := module.EscapeVersion(mv.Version)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	for ext, data := range files {
		if err := os.WriteFile(filepath.Join(vdir, escVersion+ext), data, 0o644); err != nil {
			return err
		}
	}
	listPath := filepath.Join(vdir, "list")
	list, err := os.ReadFile(listPath)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	versions := strings.Fields(string(list))
	if !slices.Contains(versions, mv.Version) {
		versions = append(versions, mv.Version)
	}
	return os.WriteFile(listPath, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// gitArchive returns the files of commit as git archive writes them, which
// is what the go command itself packs for a module version from git.
func gitArchive(repo, commit string) ([]modzip.File, error) {
	out, err := git(repo, "-c", "core.autocrlf=input", "-c", "core.eol=lf", "archive", "--format=zip", commit)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(strings.NewReader(out), int64(len(out)))
	if err != nil {
		return nil, fmt.Errorf("reading git archive: %w", err)
	}
	var files []modzip.File
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, "/") {
			files = append(files, archiveFile{f})
		}
	}
	return files, nil
}

// archiveFile is one file of the git archive, as a module zip input.
type archiveFile struct{ f *zip.File }

func (a archiveFile) Path() string                 { return a.f.Name }
func (a archiveFile) Lstat() (os.FileInfo, error)  { return a.f.FileInfo(), nil }
func (a archiveFile) Open() (io.ReadCloser, error) { return a.f.Open() }

// git runs git in repo and returns its standard output.
func git(repo string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = repo
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
