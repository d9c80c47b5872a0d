package blob

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/zeebo/blake3"
)

// BufferSize is the size of an upload's write buffer. Large buffers are what
// make uploads fast: multipart parts hand out at most 4 KiB per Read, and
// hashing and writing 4 KiB at a time runs at less than half disk speed
// (research/perf.md §4).
const BufferSize = 1 << 20

// writebackEvery is how many written bytes trigger an asynchronous writeback
// request, so the disk works while the body is still arriving and the final
// fsync has little left to flush.
const writebackEvery = 8 << 20

// bufferPool recycles upload buffers so that concurrent uploads do not each
// allocate a fresh MiB for the garbage collector.
var bufferPool = sync.Pool{New: func() any {
	b := make([]byte, BufferSize)
	return &b
}}

type uploadState int

const (
	stateWriting uploadState = iota
	stateFinished
	statePublished
	stateAborted
)

// fileUpload is a FileSystem's Upload: a temp file that is hashed while it
// is written.
type fileUpload struct {
	store    *FileSystem
	file     *os.File // nil once closed
	tmpPath  string
	bufp     *[]byte // pooled buffer; nil once returned
	buf      []byte
	n        int // bytes buffered in buf
	hasher   *blake3.Hasher
	size     int64 // bytes accepted so far
	written  int64 // bytes written to the file
	kicked   int64 // file offset up to which writeback was requested
	state    uploadState
	hash     string
	expected string // the declared hash, or ""
	err      error  // first write-side failure; sticky
}

func newFileUpload(store *FileSystem, file *os.File) *fileUpload {
	bp := bufferPool.Get().(*[]byte)
	return &fileUpload{
		store:   store,
		file:    file,
		tmpPath: file.Name(),
		bufp:    bp,
		buf:     *bp,
		hasher:  blake3.New(),
	}
}

// Size returns how many bytes the upload has accepted so far.
func (u *fileUpload) Size() int64 { return u.size }

// Write buffers p, hashing and writing it out a buffer at a time.
func (u *fileUpload) Write(p []byte) (int, error) {
	if err := u.writable(); err != nil {
		return 0, err
	}
	total := 0
	for len(p) > 0 {
		if u.n == 0 && len(p) >= len(u.buf) {
			// Large write with an empty buffer: skip the copy.
			if err := u.writeOut(p); err != nil {
				return total, err
			}
			u.size += int64(len(p))
			return total + len(p), nil
		}
		c := copy(u.buf[u.n:], p)
		u.n += c
		u.size += int64(c)
		total += c
		p = p[c:]
		if u.n == len(u.buf) {
			if err := u.flush(); err != nil {
				return total, err
			}
		}
	}
	return total, nil
}

// ReadFrom fills the upload's buffer from r, flushing it each time it is
// full, until r returns io.EOF. Reading into the full buffer (rather than
// through r's own small reads) is what keeps hashing and file writes at
// BufferSize granularity. A read error from r is returned as is; a write
// error is wrapped and also makes the upload unusable.
func (u *fileUpload) ReadFrom(r io.Reader) (int64, error) {
	if err := u.writable(); err != nil {
		return 0, err
	}
	var total int64
	for {
		if u.n == len(u.buf) {
			if err := u.flush(); err != nil {
				return total, err
			}
		}
		m, err := r.Read(u.buf[u.n:])
		if m < 0 || m > len(u.buf)-u.n {
			return total, fmt.Errorf("blob: reader returned invalid count %d", m)
		}
		u.n += m
		u.size += int64(m)
		total += int64(m)
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// Key is "": the file_system store publishes at the content address.
func (u *fileUpload) Key() string { return "" }

// Finish flushes the buffer, fsyncs and closes the temp file, and returns the
// content address and size. It may be called again and returns the same.
func (u *fileUpload) Finish() (hash string, size int64, err error) {
	switch u.state {
	case stateFinished, statePublished:
		return u.hash, u.size, nil
	case stateAborted:
		return "", 0, fmt.Errorf("%w: Finish after Abort", ErrUploadState)
	}
	if u.err != nil {
		return "", 0, u.err
	}
	if err := u.flush(); err != nil {
		return "", 0, err
	}
	if err := u.file.Sync(); err != nil {
		return "", 0, u.fail(fmt.Errorf("blob: fsync temp file: %w", err))
	}
	err = u.file.Close()
	u.file = nil
	if err != nil {
		return "", 0, u.fail(fmt.Errorf("blob: close temp file: %w", err))
	}
	u.releaseBuffer()
	var sum [32]byte
	u.hasher.Sum(sum[:0])
	u.hash = HashPrefix + hex.EncodeToString(sum[:])
	u.state = stateFinished
	return u.hash, u.size, nil
}

// Publish makes the finished bytes visible at their content address, the
// only place this store keeps them (held, which can only name that object,
// needs no look: an object already there is kept). The object is created
// by link(2), which never replaces an existing name, so a concurrent
// Publish of the same bytes cannot expose a partial file. The shard
// directories are fsynced on every call (even when the object already
// existed, since another publisher may not have synced yet) so that the
// object survives a crash once Publish returns. The temp file is removed.
func (u *fileUpload) Publish(*Ref) (Ref, error) {
	switch u.state {
	case statePublished:
		return Ref{Hash: u.hash}, nil
	case stateWriting:
		return Ref{}, fmt.Errorf("%w: Publish before Finish", ErrUploadState)
	case stateAborted:
		return Ref{}, fmt.Errorf("%w: Publish after Abort", ErrUploadState)
	}
	if err := u.publish(); err != nil {
		return Ref{}, err
	}
	u.state = statePublished
	return Ref{Hash: u.hash}, nil
}

// publish links the temp file at the content address.
func (u *fileUpload) publish() error {
	if u.expected != "" && u.expected != u.hash {
		return fmt.Errorf("%w: %s, not %s", ErrHashMismatch, u.hash, u.expected)
	}
	hexDigest, err := canonicalHex(u.hash)
	if err != nil {
		return err
	}
	objects := u.store.objects
	first, second, object := shardDirs(objects, hexDigest)
	for _, d := range []string{first, second} {
		if err := os.Mkdir(d, dirPerm); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("blob: create shard dir: %w", err)
		}
	}
	if err := os.Link(u.tmpPath, object); err != nil {
		if !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("blob: link object %s: %w", u.hash, err)
		}
		if err := u.healExisting(object); err != nil {
			return err
		}
	}
	for _, d := range []string{second, first, objects} {
		if err := syncDir(d); err != nil {
			return fmt.Errorf("blob: fsync %s: %w", d, err)
		}
	}
	if err := os.Remove(u.tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: remove temp file: %w", err)
	}
	return nil
}

// healExisting accepts an object already at the address when its size
// matches (identical bytes by construction). A size mismatch can only be
// damage from outside the store, so the verified temp file atomically
// replaces it.
func (u *fileUpload) healExisting(object string) error {
	st, err := os.Stat(object)
	if err != nil {
		return fmt.Errorf("blob: stat existing object %s: %w", u.hash, err)
	}
	if st.Mode().IsRegular() && st.Size() == u.size {
		return nil
	}
	if err := os.Rename(u.tmpPath, object); err != nil {
		return fmt.Errorf("blob: replace damaged object %s: %w", u.hash, err)
	}
	return nil
}

// Abort discards the upload and removes its temp file. It is idempotent and
// does nothing after a successful Publish.
func (u *fileUpload) Abort() error {
	if u.state == stateAborted || u.state == statePublished {
		u.state = stateAborted
		return nil
	}
	u.state = stateAborted
	if u.file != nil {
		_ = u.file.Close()
		u.file = nil
	}
	u.releaseBuffer()
	if err := os.Remove(u.tmpPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: remove temp file: %w", err)
	}
	return nil
}

func (u *fileUpload) writable() error {
	if u.state != stateWriting {
		return fmt.Errorf("%w: write after Finish or Abort", ErrUploadState)
	}
	return u.err
}

// flush hashes and writes out the buffered bytes.
func (u *fileUpload) flush() error {
	if u.n == 0 {
		return nil
	}
	err := u.writeOut(u.buf[:u.n])
	u.n = 0
	return err
}

// writeOut hashes p and appends it to the temp file.
func (u *fileUpload) writeOut(p []byte) error {
	if u.err != nil {
		return u.err
	}
	_, _ = u.hasher.Write(p) // never fails
	if _, err := u.file.Write(p); err != nil {
		return u.fail(fmt.Errorf("blob: write temp file: %w", err))
	}
	u.written += int64(len(p))
	if u.written-u.kicked >= writebackEvery {
		startWriteback(u.file, u.kicked, u.written-u.kicked)
		u.kicked = u.written
	}
	return nil
}

// fail records a write-side error so that later calls report it too.
func (u *fileUpload) fail(err error) error {
	if u.err == nil {
		u.err = err
	}
	return u.err
}

func (u *fileUpload) releaseBuffer() {
	if u.bufp != nil {
		bufferPool.Put(u.bufp)
		u.bufp = nil
		u.buf = nil
		u.n = 0
	}
}
