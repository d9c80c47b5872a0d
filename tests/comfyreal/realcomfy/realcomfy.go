// Package realcomfy runs real, unmodified ComfyUI servers for tests: the
// source named by $COMFYGATE_COMFYUI_SRC (a directory holding a
// ComfyUI-*.tar.gz, or an unpacked tree with main.py), on the CPU, with
// the system's Python and Debian's PyTorch. Each server has its own port
// and input, output and temp directories; Start starts several at once.
//
// ComfyUI imports a few modules at start-up that it uses only to load
// models and that Debian does not package (einops, kornia, safetensors,
// spandrel, spandrel_extra_arches, torchaudio, torchsde, transformers).
// The harness writes a sitecustomize.py that registers inert stand-ins for
// them (empty modules whose attributes are created on access) and puts it
// on PYTHONPATH; no image node touches them, and nothing of ComfyUI itself
// is changed.
//
// Use:
//
//	src := realcomfy.Require(t)          // skips when $COMFYGATE_COMFYUI_SRC is unset
//	servers := src.Start(t, 2)           // ready servers, stopped when t ends
//	resp, _ := http.Get(servers[0].URL + "/object_info")
//
// Environment: COMFYGATE_COMFYUI_SRC (required, else Require skips),
// COMFYGATE_COMFYUI_PYTHON (default /usr/bin/python3, which must import
// torch, torchvision, aiohttp, numpy, PIL, yaml, scipy, tqdm and psutil:
// the Debian packages in Packages), COMFYGATE_COMFYUI_CACHE (where the
// tarball is unpacked; default the user cache directory).
package realcomfy

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// EnvSource names the ComfyUI source: a directory holding a
// ComfyUI-*.tar.gz, or an unpacked tree (with main.py).
const EnvSource = "COMFYGATE_COMFYUI_SRC"

// Packages are the Debian packages the servers need (tests/run installs
// them when the source is there).
var Packages = []string{"python3-torch", "python3-torchvision", "python3-aiohttp", "python3-numpy",
	"python3-pil", "python3-yaml", "python3-scipy", "python3-tqdm", "python3-psutil"}

// stubModules are the modules the sitecustomize.py stands in for.
var stubModules = []string{"einops", "kornia", "safetensors", "spandrel", "spandrel_extra_arches",
	"torchaudio", "torchsde", "transformers"}

// Source is a ComfyUI tree ready to run.
type Source struct {
	// Dir is the ComfyUI tree (holding main.py).
	Dir string
	// Python is the interpreter that runs it.
	Python string
	// Stubs is the directory put on PYTHONPATH (its sitecustomize.py).
	Stubs string
}

var (
	prepareOnce sync.Once
	prepared    *Source
	prepareErr  error
)

// Require returns the ComfyUI source of $COMFYGATE_COMFYUI_SRC, unpacked
// once per process into the cache. It skips t when the variable is unset
// or names nothing, and fails it when the source is there but cannot run
// (the Python modules are missing: install Packages, as tests/run does).
func Require(t testing.TB) *Source {
	t.Helper()
	src := os.Getenv(EnvSource)
	if src == "" {
		t.Skip(EnvSource + " is not set: these tests run a real ComfyUI (tests/run sets it to ../shared/comfyui when that exists)")
	}
	if _, err := os.Stat(src); err != nil {
		t.Skipf("%s=%s: %v", EnvSource, src, err)
	}
	prepareOnce.Do(func() { prepared, prepareErr = prepare(src) })
	if prepareErr != nil {
		t.Fatalf("preparing the ComfyUI of %s=%s: %v", EnvSource, src, prepareErr)
	}
	return prepared
}

func prepare(src string) (*Source, error) {
	dir, err := tree(src)
	if err != nil {
		return nil, err
	}
	python := os.Getenv("COMFYGATE_COMFYUI_PYTHON")
	if python == "" {
		python = "/usr/bin/python3"
	}
	check := exec.Command(python, "-c", "import torch, torchvision, aiohttp, numpy, PIL, yaml, scipy, tqdm, psutil")
	if out, err := check.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%s cannot import ComfyUI's modules (install the Debian packages %s): %v\n%s",
			python, strings.Join(Packages, " "), err, out)
	}
	stubs, err := writeStubs(filepath.Dir(dir))
	if err != nil {
		return nil, err
	}
	return &Source{Dir: dir, Python: python, Stubs: stubs}, nil
}

// tree returns an unpacked ComfyUI tree for src: src itself (or its
// ComfyUI folder) when it holds main.py, else its ComfyUI-*.tar.gz
// unpacked into the cache under the tarball's digest.
func tree(src string) (string, error) {
	for _, d := range []string{src, filepath.Join(src, "ComfyUI")} {
		if _, err := os.Stat(filepath.Join(d, "main.py")); err == nil {
			return d, nil
		}
	}
	tarballs, _ := filepath.Glob(filepath.Join(src, "ComfyUI-*.tar.gz"))
	if len(tarballs) == 0 {
		return "", fmt.Errorf("%s holds neither main.py nor a ComfyUI-*.tar.gz", src)
	}
	tarball := tarballs[len(tarballs)-1]
	sum, err := digest(tarball)
	if err != nil {
		return "", err
	}
	cache := os.Getenv("COMFYGATE_COMFYUI_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		cache = filepath.Join(base, "comfygate", "comfyui")
	}
	root := filepath.Join(cache, strings.TrimSuffix(filepath.Base(tarball), ".tar.gz")+"-"+sum[:12])
	dir := filepath.Join(root, "ComfyUI")
	if _, err := os.Stat(filepath.Join(dir, "main.py")); err == nil {
		return dir, nil
	}
	// Unpacked beside the final name and renamed, so that two test
	// processes preparing at once never see half a tree.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(cache, ".unpack-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := untar(tarball, tmp); err != nil {
		return "", fmt.Errorf("unpacking %s: %w", tarball, err)
	}
	if _, err := os.Stat(filepath.Join(tmp, "ComfyUI", "main.py")); err != nil {
		return "", fmt.Errorf("%s has no ComfyUI/main.py", tarball)
	}
	if err := os.Rename(tmp, root); err != nil && !errors.Is(err, os.ErrExist) {
		if _, serr := os.Stat(filepath.Join(dir, "main.py")); serr != nil {
			return "", err
		}
	}
	return dir, nil
}

func digest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// untar unpacks a .tar.gz of regular files and directories into dst.
func untar(path, dst string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || name == ".." || strings.HasPrefix(name, ".."+string(filepath.Separator)) {
			return fmt.Errorf("unsafe path %q", h.Name)
		}
		target := filepath.Join(dst, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode)&0o755|0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, tr)
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// writeStubs writes the sitecustomize.py of the stand-in modules into
// <dir>/stubs and returns that directory.
func writeStubs(dir string) (string, error) {
	stubs := filepath.Join(dir, "stubs")
	if err := os.MkdirAll(stubs, 0o755); err != nil {
		return "", err
	}
	names := make([]string, len(stubModules))
	for i, m := range stubModules {
		names[i] = fmt.Sprintf("%q", m)
	}
	code := strings.Replace(sitecustomize, "@NAMES@", strings.Join(names, ", "), 1)
	tmp := filepath.Join(stubs, fmt.Sprintf(".sitecustomize-%d.py", os.Getpid()))
	if err := os.WriteFile(tmp, []byte(code), 0o644); err != nil {
		return "", err
	}
	return stubs, os.Rename(tmp, filepath.Join(stubs, "sitecustomize.py"))
}

// sitecustomize registers inert modules for the names ComfyUI imports at
// start-up but uses only to load models: any attribute of them is a class
// that accepts any arguments, can be subclassed and iterates as empty.
const sitecustomize = `# Written by comfygate's tests (tests/comfyreal/realcomfy): inert stand-ins
# for modules ComfyUI imports at start-up and uses only to load models.
import importlib.abc, importlib.machinery, sys, types

NAMES = {@NAMES@}

class _Meta(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub
    def __iter__(cls):
        return iter(())

class _Stub(metaclass=_Meta):
    def __init__(self, *args, **kwargs): pass
    def __call__(self, *args, **kwargs): return _Stub()
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub
    def __iter__(self): return iter(())

class _Module(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Stub

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] in NAMES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None
    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module
    def exec_module(self, module):
        pass

sys.meta_path.insert(0, _Finder())
`
