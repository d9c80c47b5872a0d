package s3blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/comfygate/comfygate/storage/blob"
)

// Open fetches the object from from on (one GET, whose answer is awaited
// here, so that a missing object or a store that is down is an error before
// the caller writes anything) and returns it as a ReadSeekCloser. A Seek
// elsewhere makes the next Read fetch again from there.
func (s *Store) Open(ctx context.Context, obj blob.Ref, from int64) (io.ReadSeekCloser, int64, error) {
	key, err := s.objectKey(obj)
	if err != nil {
		return nil, 0, err
	}
	hash := obj.String()
	if from < 0 {
		return nil, 0, fmt.Errorf("s3blob: open %s at negative offset %d", hash, from)
	}
	r := &objectReader{ctx: ctx, s: s, key: key, hash: hash, pos: from}
	body, size, err := r.get(from)
	if isInvalidRange(err) {
		// from is at or past the end: there is nothing to fetch, but the
		// object exists; learn its size instead.
		size, err = s.Stat(ctx, obj)
		if err != nil {
			return nil, 0, err
		}
		r.size = size
		return r, size, nil
	}
	if err != nil {
		return nil, 0, err
	}
	r.body, r.bodyPos, r.size = body, from, size
	return r, size, nil
}

// objectReader reads an object through ranged GETs, reusing the open
// response as long as reads stay where it is.
type objectReader struct {
	ctx     context.Context
	s       *Store
	key     string
	hash    string // names the object in messages
	size    int64
	pos     int64         // where the next Read reads
	body    io.ReadCloser // nil when no response is open
	bodyPos int64         // the offset body is at
	err     error         // sticky read failure
}

// get sends a GET of the object from off to its end and returns the body
// and the object's whole size.
func (r *objectReader) get(off int64) (io.ReadCloser, int64, error) {
	opts := minio.GetObjectOptions{}
	if off > 0 {
		if err := opts.SetRange(off, 0); err != nil {
			return nil, 0, err
		}
	}
	body, info, header, err := r.s.core.GetObject(r.ctx, r.s.bucket, r.key, opts)
	if err != nil {
		return nil, 0, mapErr("get "+r.hash, err)
	}
	size := info.Size
	if off > 0 {
		// Content-Range: bytes <first>-<last>/<size>
		cr := header.Get("Content-Range")
		_, total, ok := strings.Cut(cr, "/")
		n, perr := strconv.ParseInt(total, 10, 64)
		if !ok || perr != nil {
			body.Close()
			return nil, 0, fmt.Errorf("s3blob: get %s: unusable Content-Range %q", r.hash, cr)
		}
		size = n
	}
	return body, size, nil
}

func (r *objectReader) Read(p []byte) (int, error) {
	if r.err != nil {
		return 0, r.err
	}
	if r.pos >= r.size {
		return 0, io.EOF
	}
	if r.body == nil || r.bodyPos != r.pos {
		r.closeBody()
		body, _, err := r.get(r.pos)
		if err != nil {
			r.err = err
			return 0, err
		}
		r.body, r.bodyPos = body, r.pos
	}
	if left := r.size - r.pos; int64(len(p)) > left {
		p = p[:left]
	}
	n, err := r.body.Read(p)
	r.pos += int64(n)
	r.bodyPos += int64(n)
	switch {
	case errors.Is(err, io.EOF) && r.pos < r.size:
		r.err = fmt.Errorf("s3blob: read %s: %w", r.hash, io.ErrUnexpectedEOF)
		return n, r.err
	case err != nil && !errors.Is(err, io.EOF):
		r.err = fmt.Errorf("s3blob: read %s: %w", r.hash, err)
		return n, r.err
	case r.pos == r.size:
		return n, io.EOF
	}
	return n, nil
}

func (r *objectReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, errors.New("s3blob: seek: invalid whence")
	}
	if abs < 0 {
		return 0, errors.New("s3blob: seek: negative position")
	}
	r.pos = abs
	return abs, nil
}

func (r *objectReader) Close() error {
	r.closeBody()
	return nil
}

func (r *objectReader) closeBody() {
	if r.body != nil {
		_ = r.body.Close()
		r.body = nil
	}
}
