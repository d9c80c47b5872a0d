package blob

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// List returns up to limit published objects after after, in ascending
// order of their addresses. The shard directories
// (<hex[0:2]>/<hex[2:4]>/<hex>) sort as the addresses do, so the walk reads
// only the directories at or past after's.
func (f *FileSystem) List(ctx context.Context, after Ref, limit int) ([]Ref, error) {
	if limit <= 0 {
		return nil, nil
	}
	afterHex := ""
	if after != (Ref{}) {
		if after.Key != "" {
			return nil, fmt.Errorf("%w: %q", ErrInvalidKey, after.Key)
		}
		hx, err := canonicalHex(after.Hash)
		if err != nil {
			return nil, err
		}
		afterHex = hx
	}
	var out []Ref
	firsts, err := readSortedDir(f.objects)
	if err != nil {
		return nil, err
	}
	for _, first := range firsts {
		if afterHex != "" && first < afterHex[0:2] {
			continue
		}
		seconds, err := readSortedDir(filepath.Join(f.objects, first))
		if err != nil {
			return nil, err
		}
		for _, second := range seconds {
			if afterHex != "" && first+second < afterHex[0:4] {
				continue
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			names, err := readSortedDir(filepath.Join(f.objects, first, second))
			if err != nil {
				return nil, err
			}
			for _, name := range names {
				if name <= afterHex || !strings.HasPrefix(name, first+second) {
					continue
				}
				if _, err := canonicalHex(HashPrefix + name); err != nil {
					continue // not an object this store wrote
				}
				out = append(out, Ref{Hash: HashPrefix + name})
				if len(out) == limit {
					return out, nil
				}
			}
		}
	}
	return out, nil
}

// readSortedDir returns the names in dir in ascending order; a directory
// that does not exist (yet, or any more) holds none.
func readSortedDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir) // sorted by name
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("blob: list %s: %w", dir, err)
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}
