package httpx

import (
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
)

// Default body rate bound (see BodyRate).
const (
	DefaultMinBodyRate = 1024 // bytes per second
	DefaultBodyGrace   = 30 * time.Second
)

// BodyRate bounds how slowly a request body may arrive. A body trickled a
// byte at a time (slow POST, slowloris) holds its connection, a goroutine
// and an upload for as long as the client keeps trickling. Caddy's
// read_body bounds the whole body instead, which also cuts large uploads
// over slow links.
//
// From the handler's first read, the body must average Rate bytes a
// second, with Grace of slack, and may not stall for longer than Grace.
// The read deadline is the earlier of first + Grace + received/Rate and
// last read + Grace. That is Apache mod_reqtimeout's body MinRate rule,
// plus a stall bound so that a fast start cannot pay for an unlimited
// stall later.
type BodyRate struct {
	Rate  int64 // bytes per second; <= 0: no bound
	Grace time.Duration
}

// BodyTooSlow is the answer to a body cut by a BodyRate.
func BodyTooSlow() *apierr.Error {
	return apierr.New(http.StatusRequestTimeout, "request_timeout",
		"the request body arrived too slowly; send it again")
}

// Apply bounds r's body in place. Call the returned function when the
// handler returns: it removes the read deadline, which the server would
// otherwise apply to the connection's next read. A request without a body,
// or a connection whose deadline cannot be set (HTTP/3), is left alone.
func (b BodyRate) Apply(w http.ResponseWriter, r *http.Request) (release func()) {
	if b.Rate <= 0 || r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return func() {}
	}
	rb := &rateBody{ReadCloser: r.Body, rc: http.NewResponseController(w), rate: b.Rate, grace: b.Grace}
	if r.ProtoMajor == 1 {
		rb.header = w.Header()
	}
	r.Body = rb
	return rb.clear
}

// deadlineStep is how far the deadline must move before it is set again:
// the deadline in force lags the rule by less than this, so the bound is
// at most that much stricter, and a fast body is not charged one deadline
// update per read.
const deadlineStep = 250 * time.Millisecond

type rateBody struct {
	io.ReadCloser
	rc       *http.ResponseController
	header   http.Header // HTTP/1.x: the answer's, to close the connection after a cut
	rate     int64
	grace    time.Duration
	first    time.Time
	received int64
	deadline time.Time // the read deadline in force; zero: none
	off      bool      // the connection does not take deadlines, or the body ended
	err      error
}

func (b *rateBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	b.arm(time.Now())
	n, err := b.ReadCloser.Read(p)
	b.received += int64(n)
	switch {
	case err == io.EOF:
		// Nothing is left to bound (net/http clears an HTTP/1 deadline
		// itself when the body ends; an HTTP/2 stream's would still fire).
		b.clear()
		b.off = true
	case err != nil && isTimeout(err) && !b.deadline.IsZero():
		// The rest of the body is not read: the connection closes after
		// the answer (else the server would wait for the rest, trickled,
		// to reuse it).
		if b.header != nil {
			b.header.Set("Connection", "close")
		}
		b.clear()
		b.err = BodyTooSlow().WithCause(err)
		return n, b.err
	}
	return n, err
}

// arm sets the read deadline the rule gives at now.
func (b *rateBody) arm(now time.Time) {
	if b.off {
		return
	}
	if b.first.IsZero() {
		b.first = now
	}
	d := now.Add(b.grace) // the stall bound
	if secs := b.received / b.rate; secs < int64(time.Hour/time.Second)*24*365 {
		credit := time.Duration(secs)*time.Second + time.Duration(b.received%b.rate)*time.Second/time.Duration(b.rate)
		if avg := b.first.Add(b.grace + credit); avg.Before(d) {
			d = avg
		}
	}
	if !b.deadline.IsZero() && d.Sub(b.deadline) < deadlineStep {
		return
	}
	if err := b.rc.SetReadDeadline(d); err != nil {
		b.off = true // HTTP/3 or a connection without deadlines: unbounded, as before
		return
	}
	b.deadline = d
}

// clear removes the read deadline Read set, if any.
func (b *rateBody) clear() {
	if !b.deadline.IsZero() {
		_ = b.rc.SetReadDeadline(time.Time{})
		b.deadline = time.Time{}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// ReadFailure is the answer to a request body that could not be read: 413
// over limit (an http.MaxBytesReader's), 408 for a body a BodyRate cut,
// else 400.
func ReadFailure(err error, limit int64) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return apierr.PayloadTooLarge(limit)
	}
	if e, ok := apierr.As(err); ok {
		return e
	}
	return apierr.InvalidRequest("the request body could not be read").WithCause(err)
}
