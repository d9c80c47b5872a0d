package s3blob

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"

	"github.com/minio/minio-go/v7"
	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/blob"
)

// hashChunk is how many received bytes are hashed at once: blake3 is much
// faster on large inputs than on the few KiB one multipart read returns.
const hashChunk = 1 << 20

type uploadState int

const (
	stateWriting uploadState = iota
	stateFinished
	statePublished
	stateAborted
)

// partsInFlight is how many parts of one upload are sent at once. Two keep
// the store busy while the next part fills, and let a store that hashes
// each part (for its ETag) use two cores.
const partsInFlight = 2

// upload streams bytes into a multipart upload at the key its bytes keep
// if they become the blob's. It holds at most partsInFlight+1 part buffers:
// the one being filled and those being sent.
type upload struct {
	s        *Store
	ctx      context.Context
	key      string // the object's full key: under blobs/, or the expected address
	expected string
	hasher   *blake3.Hasher
	state    uploadState
	err      error // first failure; sticky

	buf    []byte   // part being filled (a pooled buffer of partSize)
	n      int      // bytes in buf
	hashed int      // bytes of buf already hashed
	free   [][]byte // buffers of parts that have arrived
	size   int64

	uploadID string
	parts    []minio.CompletePart // the parts that arrived, in order
	flight   []sentPart           // the parts being sent, oldest first
	written  bool                 // the object at key exists (completed or put)

	hash      string
	published blob.Ref // what Publish returned
}

// sentPart is a part on its way to the store.
type sentPart struct {
	num    int
	buf    []byte
	result chan partResult
}

type partResult struct {
	part minio.ObjectPart
	err  error
}

// bufPools recycles part buffers, one pool per part size.
var bufPools sync.Map // int64 → *sync.Pool

func getBuf(size int64) []byte {
	p, _ := bufPools.LoadOrStore(size, &sync.Pool{New: func() any {
		b := make([]byte, size)
		return &b
	}})
	return *(p.(*sync.Pool).Get().(*[]byte))
}

func putBuf(b []byte) {
	if b == nil {
		return
	}
	b = b[:cap(b)]
	if p, ok := bufPools.Load(int64(len(b))); ok {
		p.(*sync.Pool).Put(&b)
	}
}

func newUpload(ctx context.Context, s *Store, key, expected string) *upload {
	return &upload{s: s, ctx: ctx, key: key, expected: expected, hasher: blake3.New(), buf: getBuf(s.partSize)}
}

func (u *upload) Size() int64 { return u.size }

// Key is the key of the object the bytes stream into, "" when it is their
// (expected) address.
func (u *upload) Key() string {
	if u.expected != "" {
		return ""
	}
	return u.s.keyName(u.key)
}

func (u *upload) writable() error {
	if u.state != stateWriting {
		return fmt.Errorf("%w: write after Finish or Abort", blob.ErrUploadState)
	}
	return u.err
}

// fail records a store-side error so that later calls report it too.
func (u *upload) fail(err error) error {
	if u.err == nil {
		u.err = err
	}
	return u.err
}

// Write copies p into part buffers, sending each one as it fills.
func (u *upload) Write(p []byte) (int, error) {
	if err := u.writable(); err != nil {
		return 0, err
	}
	total := 0
	for len(p) > 0 {
		c := copy(u.buf[u.n:], p)
		u.n += c
		u.size += int64(c)
		total += c
		p = p[c:]
		if err := u.filled(); err != nil {
			return total, err
		}
	}
	return total, nil
}

// ReadFrom reads r straight into the part buffer until io.EOF. A read error
// from r is returned as is; a store error is wrapped and makes the upload
// unusable.
func (u *upload) ReadFrom(r io.Reader) (int64, error) {
	if err := u.writable(); err != nil {
		return 0, err
	}
	var total int64
	for {
		m, err := r.Read(u.buf[u.n:])
		if m < 0 || m > len(u.buf)-u.n {
			return total, fmt.Errorf("s3blob: reader returned invalid count %d", m)
		}
		u.n += m
		u.size += int64(m)
		total += int64(m)
		if ferr := u.filled(); ferr != nil {
			return total, ferr
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}

// filled hashes what has accumulated and sends the part once it is full.
func (u *upload) filled() error {
	if u.n-u.hashed >= hashChunk || u.n == len(u.buf) {
		_, _ = u.hasher.Write(u.buf[u.hashed:u.n])
		u.hashed = u.n
	}
	if u.n < len(u.buf) {
		return nil
	}
	return u.sendPart()
}

// sendPart starts sending the filled buffer as the next part and carries on
// filling another; with partsInFlight parts on their way, the oldest must
// arrive first.
func (u *upload) sendPart() error {
	if len(u.flight) == partsInFlight {
		if err := u.waitOldest(); err != nil {
			return err
		}
	}
	if u.err != nil {
		return u.err
	}
	num := len(u.parts) + len(u.flight) + 1
	if num > maxParts {
		return u.fail(fmt.Errorf("s3blob: upload exceeds %d parts of %d bytes", maxParts, u.s.partSize))
	}
	if u.uploadID == "" {
		id, err := u.s.core.NewMultipartUpload(u.ctx, u.s.bucket, u.key, minio.PutObjectOptions{})
		if err != nil {
			return u.fail(fmt.Errorf("s3blob: start multipart upload: %w", err))
		}
		u.uploadID = id
	}
	sp := sentPart{num: num, buf: u.buf[:u.n], result: make(chan partResult, 1)}
	if k := len(u.free); k > 0 {
		u.buf, u.free = u.free[k-1], u.free[:k-1]
	} else {
		u.buf = getBuf(u.s.partSize)
	}
	u.n, u.hashed = 0, 0
	u.flight = append(u.flight, sp)
	go func(id string) {
		part, err := u.s.core.PutObjectPart(u.ctx, u.s.bucket, u.key, id, sp.num,
			bytes.NewReader(sp.buf), int64(len(sp.buf)), minio.PutObjectPartOptions{DisableContentSha256: true})
		sp.result <- partResult{part: part, err: err}
	}(u.uploadID)
	return nil
}

// waitOldest waits for the oldest part in flight, records it, and takes its
// buffer back.
func (u *upload) waitOldest() error {
	sp := u.flight[0]
	res := <-sp.result
	u.flight = u.flight[1:]
	u.free = append(u.free, sp.buf[:cap(sp.buf)])
	if res.err != nil {
		return u.fail(fmt.Errorf("s3blob: upload part %d: %w", sp.num, res.err))
	}
	u.parts = append(u.parts, minio.CompletePart{PartNumber: sp.num, ETag: res.part.ETag})
	return nil
}

// wait waits for every part in flight and returns the first failure.
func (u *upload) wait() error {
	for len(u.flight) > 0 {
		_ = u.waitOldest()
	}
	return u.err
}

// Finish hashes the tail and, when the body outgrew one part, sends the
// last part and waits for every part to arrive. The multipart upload stays
// incomplete (invisible) until Publish; a body that fits one part stays in
// memory until then.
func (u *upload) Finish() (string, int64, error) {
	switch u.state {
	case stateFinished, statePublished:
		return u.hash, u.size, nil
	case stateAborted:
		return "", 0, fmt.Errorf("%w: Finish after Abort", blob.ErrUploadState)
	}
	if u.err != nil {
		return "", 0, u.err
	}
	_, _ = u.hasher.Write(u.buf[u.hashed:u.n])
	u.hashed = u.n
	if u.uploadID != "" {
		if u.n > 0 {
			if err := u.sendPart(); err != nil {
				return "", 0, err
			}
		}
		if err := u.wait(); err != nil {
			return "", 0, err
		}
		u.releaseBuffers()
	}
	var sum [32]byte
	u.hasher.Sum(sum[:0])
	u.hash = blob.HashPrefix + hex.EncodeToString(sum[:])
	u.state = stateFinished
	return u.hash, u.size, nil
}

// Publish keeps held when it still holds the bytes (Abort then aborts this
// upload's multipart upload); otherwise it makes the upload's own object
// visible at its key, completing the multipart upload or putting the body
// held in memory. Nothing is copied.
func (u *upload) Publish(held *blob.Ref) (blob.Ref, error) {
	switch u.state {
	case statePublished:
		return u.published, nil
	case stateWriting:
		return blob.Ref{}, fmt.Errorf("%w: Publish before Finish", blob.ErrUploadState)
	case stateAborted:
		return blob.Ref{}, fmt.Errorf("%w: Publish after Abort", blob.ErrUploadState)
	}
	if u.expected != "" && u.hash != u.expected {
		return blob.Ref{}, fmt.Errorf("%w: %s, not %s", blob.ErrHashMismatch, u.hash, u.expected)
	}
	if held != nil {
		switch _, err := u.s.Stat(u.ctx, *held); {
		case err == nil:
			u.published, u.state = *held, statePublished
			return u.published, nil
		case !errors.Is(err, fs.ErrNotExist):
			return blob.Ref{}, fmt.Errorf("s3blob: publish %s: %w", u.hash, err)
		}
		// The recorded object is gone (damage from outside): these bytes
		// take its place.
	}
	var err error
	if u.uploadID != "" {
		_, err = u.s.core.CompleteMultipartUpload(u.ctx, u.s.bucket, u.key, u.uploadID, u.parts, minio.PutObjectOptions{})
	} else {
		_, err = u.s.core.PutObject(u.ctx, u.s.bucket, u.key, bytes.NewReader(u.buf[:u.n]), int64(u.n), "", "",
			minio.PutObjectOptions{DisableContentSha256: true})
	}
	if err != nil {
		return blob.Ref{}, u.fail(fmt.Errorf("s3blob: publish %s: %w", u.hash, err))
	}
	u.written = true
	u.published, u.state = blob.Ref{Hash: u.hash, Key: u.Key()}, statePublished
	u.releaseBuffers()
	return u.published, nil
}

// Abort aborts the multipart upload unless Publish completed it, waits for
// a part in flight, and returns the buffers. An object Publish wrote is the
// blob's, or, when the transaction around Publish failed, an orphan that
// the storage layer's sweep removes: only it can tell which. Abort runs on
// its own bounded context: the upload's may be the one that was canceled.
func (u *upload) Abort() error {
	if u.state == stateAborted {
		return nil
	}
	u.state = stateAborted
	_ = u.wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), cleanupTimeout)
	defer cancel()
	var err error
	if u.uploadID != "" && !u.written {
		err = u.s.core.AbortMultipartUpload(ctx, u.s.bucket, u.key, u.uploadID)
	}
	u.releaseBuffers()
	if err != nil {
		return fmt.Errorf("s3blob: discard upload %s: %w", u.s.keyName(u.key), err)
	}
	return nil
}

// Retract removes the object Publish wrote at the upload's own key, for a
// create the storage layer knows did not commit (storage.Retracter): the
// key is this upload's alone, so no record can name it. An object at a
// declared hash's address is never retracted (another create may record
// it); nor is anything when Publish kept the blob's recorded object.
func (u *upload) Retract() error {
	if !u.written || u.expected != "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), cleanupTimeout)
	defer cancel()
	if err := u.s.Remove(ctx, blob.Ref{Hash: u.hash, Key: u.Key()}); err != nil {
		return fmt.Errorf("s3blob: retract %s: %w", u.s.keyName(u.key), err)
	}
	u.written = false
	return nil
}

func (u *upload) releaseBuffers() {
	putBuf(u.buf)
	for _, b := range u.free {
		putBuf(b)
	}
	u.buf, u.free, u.n, u.hashed = nil, nil, 0, 0
}
