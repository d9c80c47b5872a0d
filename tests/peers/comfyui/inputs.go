package comfyuipeer

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// inputStore is the peer's input folder: in memory by default, or real
// files under Options.InputDir laid out as ComfyUI lays out its input
// directory (<dir>/<subfolder>/<filename>), so that a gateway given that
// directory can remove what it staged. Keys are slash-separated
// subfolder/name paths. Its methods are called with Peer.mu held.
type inputStore struct {
	dir string            // "" keeps inputs in mem
	mem map[string][]byte // subfolder/name → content
}

// localKey reports whether key stays inside the input folder, as ComfyUI
// checks before it reads or writes an input.
func localKey(key string) bool {
	return key != "" && filepath.IsLocal(filepath.FromSlash(key))
}

func (s *inputStore) get(key string) ([]byte, bool) {
	if !localKey(key) {
		return nil, false
	}
	if s.dir == "" {
		data, ok := s.mem[key]
		return data, ok
	}
	data, err := os.ReadFile(filepath.Join(s.dir, filepath.FromSlash(key)))
	return data, err == nil
}

func (s *inputStore) has(key string) bool {
	if !localKey(key) {
		return false
	}
	if s.dir == "" {
		_, ok := s.mem[key]
		return ok
	}
	fi, err := os.Stat(filepath.Join(s.dir, filepath.FromSlash(key)))
	return err == nil && fi.Mode().IsRegular()
}

func (s *inputStore) put(key string, data []byte) error {
	if !localKey(key) {
		return fs.ErrPermission
	}
	if s.dir == "" {
		s.mem[key] = data
		return nil
	}
	full := filepath.Join(s.dir, filepath.FromSlash(key))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err
	}
	return os.WriteFile(full, data, 0o644)
}

// list returns every input file as subfolder/name, sorted. A directory that
// vanished (the test removed it) lists nothing.
func (s *inputStore) list() []string {
	var names []string
	if s.dir == "" {
		for k := range s.mem {
			names = append(names, k)
		}
	} else {
		_ = filepath.WalkDir(s.dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil // unreadable or removed meanwhile: not an input
			}
			if d.Type().IsRegular() {
				if rel, err := filepath.Rel(s.dir, p); err == nil {
					names = append(names, filepath.ToSlash(rel))
				}
			}
			return nil
		})
	}
	sort.Strings(names)
	return names
}

// uniqueName is the name an upload without overwrite gets when name is
// taken by different content: "name (1).ext", "name (2).ext", …
func (s *inputStore) uniqueName(sub, name string) string {
	ext := path.Ext(name)
	base := name[:len(name)-len(ext)]
	for i := 1; ; i++ {
		cand := fmt.Sprintf("%s (%d)%s", base, i, ext)
		if !s.has(path.Join(sub, cand)) {
			return cand
		}
	}
}
