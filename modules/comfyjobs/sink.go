package comfyjobs

import (
	"errors"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// errStreamGone is what a sink answers once its client has gone or the
// stream has ended.
var errStreamGone = errors.New("event stream closed")

// sink is where one client's event-stream frames go. Only the job's watch
// goroutine calls send; end may be called from anywhere, more than once.
type sink interface {
	// send writes complete SSE frames, flushed. An error means the
	// client is gone; the stream is dropped.
	send(frames []byte) error
	// end finishes the response (the stream ended, or the server stops).
	end()
}

// parkedSink serves a stream over an HTTP/1.1 connection taken from the
// HTTP server once the headers are out. An idle stream then costs a small
// struct and one goroutine blocked in a tiny read, instead of the whole
// request's goroutine, stack and buffers: thousands of clients can wait on
// a job for little memory. The body is already chunked (HTTP/1.1, no
// Content-Length), so every send is one chunk and end is the last chunk.
type parkedSink struct {
	conn    net.Conn
	gone    atomic.Bool
	once    sync.Once
	release func()
}

// park takes r's connection for a stream whose 200 and headers w has
// flushed. It declines (and the request goroutine serves the stream
// itself) unless the exchange is plain HTTP/1.1 whose body net/http
// chunks and nothing between re-encodes the body, e.g. compression.
func park(w http.ResponseWriter, r *http.Request, release func()) (*parkedSink, bool) {
	if r.ProtoMajor != 1 || r.ProtoMinor != 1 || w.Header().Get("Content-Encoding") != "" {
		return nil, false
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, false
	}
	p := &parkedSink{conn: conn, release: release}
	// Anything the client sent after its request is not for us; what is
	// buffered is dropped with the reader, and watchClient discards the rest.
	_, _ = brw.Reader.Discard(brw.Reader.Buffered())
	go p.watchClient()
	return p, true
}

// watchClient notices at once when the client hangs up, so that its slot
// under max_streams frees then, not at the next failed write.
func (p *parkedSink) watchClient() {
	var b [16]byte
	for {
		if _, err := p.conn.Read(b[:]); err != nil {
			p.shut()
			return
		}
	}
}

func (p *parkedSink) send(frames []byte) error {
	if p.gone.Load() {
		return errStreamGone
	}
	chunk := make([]byte, 0, len(frames)+12)
	chunk = strconv.AppendInt(chunk, int64(len(frames)), 16)
	chunk = append(chunk, "\r\n"...)
	chunk = append(chunk, frames...)
	chunk = append(chunk, "\r\n"...)
	_ = p.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := p.conn.Write(chunk); err != nil {
		p.shut()
		return err
	}
	return nil
}

func (p *parkedSink) end() {
	if !p.gone.Load() {
		_ = p.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, _ = p.conn.Write([]byte("0\r\n\r\n"))
	}
	p.shut()
}

func (p *parkedSink) shut() {
	p.once.Do(func() {
		p.gone.Store(true)
		_ = p.conn.Close()
		p.release()
	})
}

// writerSink serves a stream through the request's own ResponseWriter,
// for connections that cannot be parked (HTTP/2 and 3, HTTP/1.0, an
// encoded body). The request goroutine waits on done and ends the sink
// when its client goes; when a write failed it aborts the response (see
// serveWriter) instead of finishing it.
type writerSink struct {
	mu     sync.Mutex
	w      http.ResponseWriter
	rc     *http.ResponseController
	closed bool
	broken bool // a write failed or timed out
	done   chan struct{}
}

func newWriterSink(w http.ResponseWriter) *writerSink {
	return &writerSink{w: w, rc: http.NewResponseController(w), done: make(chan struct{})}
}

// send writes frames and flushes them (with none, it flushes what is
// buffered: the headers). A client that does not take them within
// writeTimeout gets an error, and the stream is dropped.
//
// The write deadline is armed only while a write is under way and lifted
// as soon as it is through. An idle stream must carry none: on HTTP/2 a
// deadline is a timer on the whole stream that resets it when it passes,
// even with no write pending, and on HTTP/3 a deadline in the past fails
// the next write. Lifting it also frees the stream from any write timeout
// the server applies to ordinary responses.
func (s *writerSink) send(frames []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errStreamGone
	}
	if err := s.write(frames); err != nil {
		s.broken = true
		return err
	}
	return nil
}

func (s *writerSink) write(frames []byte) error {
	_ = s.rc.SetWriteDeadline(time.Now().Add(writeTimeout))
	if len(frames) > 0 {
		if _, err := s.w.Write(frames); err != nil {
			return err
		}
	}
	if err := s.rc.Flush(); err != nil {
		return err
	}
	_ = s.rc.SetWriteDeadline(time.Time{})
	return nil
}

// end stops writes (waiting for one in progress) and lets the request
// goroutine return.
func (s *writerSink) end() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
}

// serveWriter holds the request goroutine until the stream ends or its
// client goes. A stream whose write failed is aborted, not finished: the
// client must not take a cut-off stream for a complete one, and on HTTP/3
// a finished stream would keep the bytes its stalled client never took
// queued behind the end of the stream. http.ErrAbortHandler is the
// standard way to say so (net/http and quic-go reset the HTTP/2 or HTTP/3
// stream, or close the HTTP/1 connection, and log nothing).
func (s *writerSink) serveWriter(r *http.Request) {
	select {
	case <-s.done:
	case <-r.Context().Done():
		s.end()
	}
	s.mu.Lock()
	broken := s.broken
	s.mu.Unlock()
	if broken {
		panic(http.ErrAbortHandler)
	}
}
