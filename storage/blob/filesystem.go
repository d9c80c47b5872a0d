// Package blob is the blob-store contract (Store, Upload) and its
// file_system implementation: immutable bytes at their blake3 digest's
// address, <dir>/objects/ab/cd/<hex>. The file_system store keeps every
// object at its address (its Refs have no Key): a link costs nothing.
//
// Bytes arrive through an Upload, a temp file under <dir>/tmp (the same file
// system as objects, so that publishing is a link, not a copy). An object path
// is only ever created by link(2) of a finished, fsynced temp file, so a crash
// at any point leaves either no object or a whole one; stray temp files are
// removed by Sweep.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// dirPerm keeps blobs private to the service user.
const dirPerm = 0o700

// tempPrefix marks the files NewUpload creates, so that SweepTemp touches
// nothing else that may have been put in tmp.
const tempPrefix = "upload-"

// FileSystem is a content-addressed blob store rooted at a directory. It is
// safe for concurrent use; all state lives in the file system.
type FileSystem struct {
	dir     string
	objects string
	tmp     string
}

// NewFileSystem returns a store rooted at dir. It does no I/O; call Init at
// start-up.
func NewFileSystem(dir string) *FileSystem {
	return &FileSystem{
		dir:     dir,
		objects: filepath.Join(dir, "objects"),
		tmp:     filepath.Join(dir, "tmp"),
	}
}

// Dir returns the root directory the store was created with.
func (f *FileSystem) Dir() string { return f.dir }

// Init creates <dir>/objects and <dir>/tmp (mode 0700) if they are missing.
func (f *FileSystem) Init() error {
	for _, d := range []string{f.objects, f.tmp} {
		if err := os.MkdirAll(d, dirPerm); err != nil {
			return fmt.Errorf("blob: init %s: %w", d, err)
		}
	}
	return nil
}

// NewUpload starts an upload into a fresh temp file. Local file operations
// are not cancelable, so ctx is not used; publishing is a link whatever the
// hash, so expected only serves Publish's check.
func (f *FileSystem) NewUpload(_ context.Context, expected string) (Upload, error) {
	file, err := os.CreateTemp(f.tmp, tempPrefix+"*")
	if err != nil {
		return nil, fmt.Errorf("blob: create temp file: %w", err)
	}
	u := newFileUpload(f, file)
	u.expected = expected
	return u, nil
}

// objectPath validates obj and returns where its object lives. Objects
// here have no key: one is not a Ref this store made.
func (f *FileSystem) objectPath(obj Ref) (string, error) {
	if obj.Key != "" {
		return "", fmt.Errorf("%w: the file_system store keeps objects at their address, not at %q", ErrInvalidKey, obj.Key)
	}
	hex, err := canonicalHex(obj.Hash)
	if err != nil {
		return "", err
	}
	_, _, p := shardDirs(f.objects, hex)
	return p, nil
}

// Open opens the object, positioned at from, and returns it with its size.
// A missing object yields an error wrapping fs.ErrNotExist. The reader is
// the *os.File itself, so that serving it can use sendfile.
func (f *FileSystem) Open(_ context.Context, obj Ref, from int64) (io.ReadSeekCloser, int64, error) {
	p, err := f.objectPath(obj)
	if err != nil {
		return nil, 0, err
	}
	hash := obj.Hash
	file, err := os.Open(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, fmt.Errorf("blob %s: %w", hash, fs.ErrNotExist)
		}
		return nil, 0, fmt.Errorf("blob: open %s: %w", hash, err)
	}
	st, err := file.Stat()
	if err != nil {
		_ = file.Close()
		return nil, 0, fmt.Errorf("blob: stat %s: %w", hash, err)
	}
	if from != 0 {
		if _, err := file.Seek(from, io.SeekStart); err != nil {
			_ = file.Close()
			return nil, 0, fmt.Errorf("blob: seek %s: %w", hash, err)
		}
	}
	return file, st.Size(), nil
}

// Stat returns the size of the object, or an error wrapping
// fs.ErrNotExist.
func (f *FileSystem) Stat(_ context.Context, obj Ref) (int64, error) {
	p, err := f.objectPath(obj)
	if err != nil {
		return 0, err
	}
	hash := obj.Hash
	st, err := os.Stat(p)
	switch {
	case err == nil:
		return st.Size(), nil
	case errors.Is(err, fs.ErrNotExist):
		return 0, fmt.Errorf("blob %s: %w", hash, fs.ErrNotExist)
	default:
		return 0, fmt.Errorf("blob: stat %s: %w", hash, err)
	}
}

// Remove deletes the object; a missing object is success. Shard
// directories are kept: removing them would race with a concurrent Publish.
func (f *FileSystem) Remove(_ context.Context, obj Ref) error {
	p, err := f.objectPath(obj)
	if err != nil {
		return err
	}
	hash := obj.Hash
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: remove %s: %w", hash, err)
	}
	return nil
}

// Leftovers lists the upload temp files in <dir>/tmp (only those this store
// created: other files there are not its to remove).
func (f *FileSystem) Leftovers(context.Context) ([]Leftover, error) {
	entries, err := os.ReadDir(f.tmp)
	if err != nil {
		return nil, fmt.Errorf("blob: list temp dir: %w", err)
	}
	var out []Leftover
	for _, e := range entries {
		if !e.Type().IsRegular() || !strings.HasPrefix(e.Name(), tempPrefix) {
			continue
		}
		info, err := e.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) { // finished meanwhile
				continue
			}
			return nil, fmt.Errorf("blob: list temp dir: %w", err)
		}
		out = append(out, Leftover{Name: e.Name(), Modified: info.ModTime()})
	}
	return out, nil
}

// Sweep removes upload temp files not modified for olderThan, left by
// crashes or by callers that never ended an upload. An upload in progress
// touches its file at least every buffer flush, so pick olderThan well above
// the slowest expected upload (hours, not seconds). It returns how many files
// it removed.
func (f *FileSystem) Sweep(ctx context.Context, olderThan time.Duration) (int, error) {
	leftovers, err := f.Leftovers(ctx)
	if err != nil {
		return 0, err
	}
	return SweepStale(leftovers, olderThan, func(l Leftover) error {
		err := os.Remove(filepath.Join(f.tmp, l.Name))
		if errors.Is(err, fs.ErrNotExist) {
			return ErrGone // finished meanwhile
		}
		return err
	})
}

// syncDir fsyncs a directory so that entries created in it survive a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	serr := d.Sync()
	cerr := d.Close()
	if serr != nil {
		return serr
	}
	return cerr
}

var _ Store = (*FileSystem)(nil)
