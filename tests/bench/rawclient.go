package bench

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// rawSubmitter is a minimal HTTP/1.1 load generator for POST
// /api/v2/jobs: keep-alive connections, each request written with one
// system call from prebuilt bytes plus a fresh Idempotency-Key, each
// response read as a status line, headers and a Content-Length body.
//
// It exists because the load generator shares the machine's CPUs with the
// gateway: net/http's client spends about as much CPU per request as
// Postgres does on the insert, which the bare-insert baseline never pays.
// It still drives the real gateway over real HTTP and checks every answer:
// only a 201 with its whole body counts.
type rawSubmitter struct {
	addr   string
	prefix []byte // request line and headers up to the key's value
	suffix []byte // the rest of the headers and the body
	run    string // random per submitter, so keys never repeat across runs
	seq    atomic.Uint64
	// conns holds idle connections; nil entries are dialed on first use.
	conns chan *rawConn
}

type rawConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte // the request being written, reused
	// body is the last response body; kept to report a refusal.
	body []byte
}

// newRawSubmitter prepares requests of body to addr (host:port) for up to
// conns concurrent callers.
func newRawSubmitter(addr, path string, body []byte, conns int) *rawSubmitter {
	var run [8]byte
	if _, err := rand.Read(run[:]); err != nil {
		panic(err)
	}
	s := &rawSubmitter{addr: addr, run: hex.EncodeToString(run[:]), conns: make(chan *rawConn, conns)}
	s.prefix = []byte("POST " + path + " HTTP/1.1\r\nHost: " + addr +
		"\r\nContent-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) +
		"\r\nIdempotency-Key: ")
	s.suffix = append([]byte("\r\n\r\n"), body...)
	for range conns {
		s.conns <- nil
	}
	return s
}

// submit sends one request on an idle connection; its error is set when
// the exchange failed or the answer was not a 201.
func (s *rawSubmitter) submit() error {
	c := <-s.conns
	err := s.exchange(&c)
	if err != nil && c != nil {
		c.c.Close()
		c = nil // the next caller dials afresh
	}
	s.conns <- c
	return err
}

func (s *rawSubmitter) exchange(cp **rawConn) error {
	c := *cp
	if c == nil {
		nc, err := net.DialTimeout("tcp", s.addr, 5*time.Second)
		if err != nil {
			return err
		}
		c = &rawConn{c: nc, r: bufio.NewReaderSize(nc, 8192)}
		*cp = c
	}
	c.buf = append(c.buf[:0], s.prefix...)
	c.buf = append(c.buf, "bench-"...)
	c.buf = append(c.buf, s.run...)
	c.buf = append(c.buf, '-')
	c.buf = strconv.AppendUint(c.buf, s.seq.Add(1), 10)
	c.buf = append(c.buf, s.suffix...)
	c.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.c.Write(c.buf); err != nil {
		return err
	}
	code, closing, err := readResponse(c)
	if err != nil {
		return err
	}
	if closing { // the server ended the connection after this answer
		c.c.Close()
		*cp = nil
	}
	if code != 201 {
		return fmt.Errorf("status %d: %s", code, c.body)
	}
	return nil
}

// readResponse reads one response into c.body and returns its status code
// and whether the server closes the connection after it. It accepts only
// Content-Length framing (what the gateway sends for a JSON answer);
// anything else is an error, which closes the connection.
func readResponse(c *rawConn) (code int, closing bool, err error) {
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return 0, false, err
	}
	// "HTTP/1.1 201 Created\r\n"
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.")) || line[8] != ' ' {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	if code, err = strconv.Atoi(string(line[9:12])); err != nil {
		return 0, false, fmt.Errorf("malformed status line %q", line)
	}
	length := -1
	for {
		h, err := c.r.ReadSlice('\n')
		if err != nil {
			return 0, false, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, ok := bytes.Cut(h, []byte(":"))
		if !ok {
			return 0, false, fmt.Errorf("malformed header %q", h)
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, false, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			return 0, false, fmt.Errorf("unsupported Transfer-Encoding %q", value)
		case bytes.EqualFold(name, []byte("Connection")) && bytes.EqualFold(value, []byte("close")):
			closing = true
		}
	}
	if length < 0 {
		return 0, false, errors.New("response without Content-Length")
	}
	if cap(c.body) < length {
		c.body = make([]byte, length)
	}
	c.body = c.body[:length]
	if _, err := io.ReadFull(c.r, c.body); err != nil {
		return 0, false, err
	}
	return code, closing, nil
}
