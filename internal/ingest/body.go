package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/comfygate/comfygate/internal/apierr"
)

// errBodyTooLarge is what bodyReader returns once the body passes the limit.
var errBodyTooLarge = errors.New("ingest: request body too large")

// bodyReader sits directly on the request body, under the large bufio.Reader,
// so its per-call work happens once per MiB, not once per 4 KiB part read. It
// counts bytes against the limit, stops on context cancellation, and records
// the first transport error so that Parse can tell a client failure from a
// malformed body after mime/multipart has rewrapped it.
type bodyReader struct {
	ctx   context.Context
	r     io.Reader
	limit int64 // <= 0: no limit
	read  int64
	err   error // first non-EOF error seen; sticky
}

func (b *bodyReader) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	if err := b.ctx.Err(); err != nil {
		b.err = err
		return 0, err
	}
	if b.limit > 0 {
		// Read at most one byte past the limit: enough to know it was passed.
		if room := b.limit - b.read + 1; int64(len(p)) > room {
			p = p[:room]
		}
	}
	n, err := b.r.Read(p)
	b.read += int64(n)
	if b.limit > 0 && b.read > b.limit {
		n -= int(b.read - b.limit)
		b.read = b.limit
		b.err = errBodyTooLarge
		return n, b.err
	}
	if err != nil && err != io.EOF {
		b.err = err
	}
	return n, err
}

// classify turns a failure met while reading the multipart stream into what
// Parse returns: 413 for an over-limit body, the wrapped transport error for
// a client that went away (the caller maps it; it is not the client's fault
// in a way the envelope can express), and 400 for anything else, which can
// only be a body that is not valid multipart.
func (b *bodyReader) classify(err error, limit int64) error {
	var maxErr *http.MaxBytesError
	switch {
	case errors.Is(b.err, errBodyTooLarge):
		return apierr.PayloadTooLarge(limit).WithCause(err)
	case errors.As(b.err, &maxErr):
		return apierr.PayloadTooLarge(maxErr.Limit).WithCause(err)
	case b.err != nil:
		return fmt.Errorf("ingest: reading request body: %w", b.err)
	}
	return apierr.InvalidRequest("the request body is not valid multipart/form-data").WithCause(err)
}

// partReader records the error its part returned, so that a failed
// Upload.ReadFrom can be attributed to the read side (client or body) or the
// write side (the blob store).
type partReader struct {
	r   io.Reader
	err error
}

func (p *partReader) Read(b []byte) (int, error) {
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF {
		p.err = err
	}
	return n, err
}
