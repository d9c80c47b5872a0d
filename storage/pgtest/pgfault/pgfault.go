// Package pgfault is a Postgres wire-protocol proxy for tests that fails one
// statement of a store's on purpose: the n-th statement sent through it
// from the moment it is armed is refused by the server, never reaches the
// server, or runs on the server with its answer lost. Each of those is what
// a real fault does to a real connection (a deferred constraint or a
// serialization failure, a connection cut before the statement went out,
// a connection cut while the server committed), so the driver above sees
// the errors it sees in production, and the store's handling of them is
// what is tested, not a stand-in's.
//
// A statement is one execution the server is asked for: a simple Query
// message (BEGIN, COMMIT, a ROLLBACK TO SAVEPOINT, any statement pgx sends
// without arguments) or a Bind of the extended protocol (a prepared
// statement run with its arguments). pgx's own preparation round trips
// (Parse, Describe, Sync) and its pings are not counted. Statements are
// counted across every connection the proxy carries, in the order they
// arrive.
package pgfault

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// Kind is what an armed fault does to its statement.
type Kind int

const (
	// Refuse has the server answer the statement with an error, the
	// connection staying up: the transaction it was part of is aborted,
	// and a refused COMMIT rolls its transaction back, as a deferred
	// constraint that fails at COMMIT does.
	Refuse Kind = iota + 1
	// Lose cuts the connection before the statement reaches the server:
	// the server rolls back what the connection had open, the client's
	// write went out and no answer comes.
	Lose
	// LoseAnswer lets the server run the statement to its end (a COMMIT
	// commits) and cuts the connection before the answer reaches the
	// client.
	LoseAnswer
)

func (k Kind) String() string {
	switch k {
	case Refuse:
		return "refused"
	case Lose:
		return "lost"
	case LoseAnswer:
		return "answer lost"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Refused is the message of the error the server answers a Refused
// statement with (SQLSTATE XX000, internal_error).
const Refused = "pgfault: statement refused on purpose"

// refuseQuery replaces a refused statement: it raises on the server.
const refuseQuery = `DO $$ BEGIN RAISE EXCEPTION '` + Refused + `' USING ERRCODE = 'XX000'; END $$`

// Proxy forwards connections to one Postgres server and fails the
// statement it is armed for.
type Proxy struct {
	l      net.Listener
	target string

	mu    sync.Mutex
	sent  int    // statements since the last Arm or Disarm
	at    int    // the armed statement's number; 0 when disarmed
	kind  Kind   // what happens to it
	hit   string // the statement the fault hit, "" until it fires
	conns []net.Conn
}

// Start listens on a loopback port and forwards every connection to
// target (host:port). It stops when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("pgfault: listen: %v", err)
	}
	p := &Proxy{l: l, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// Addr is the proxy's host:port, for the DSN of the store under test
// (with sslmode=disable: the proxy reads the protocol in the clear).
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Arm makes the n-th statement (from 1) sent from now on fail as kind
// says. Only one fault is armed at a time; it fires once.
func (p *Proxy) Arm(n int, kind Kind) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent, p.at, p.kind, p.hit = 0, n, kind, ""
}

// Disarm cancels the armed fault, if it has not fired, and starts the
// count again. It returns the statement the last armed fault hit (its SQL,
// shortened), or "" when it did not fire.
func (p *Proxy) Disarm() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	hit := p.hit
	p.sent, p.at, p.hit = 0, 0, ""
	return hit
}

// Sent reports how many statements went through since the last Arm or
// Disarm.
func (p *Proxy) Sent() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent
}

// count counts one statement and reports what to do with it.
func (p *Proxy) count(sql string) (Kind, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.sent++
	if p.at == 0 || p.sent != p.at {
		return 0, false
	}
	p.at, p.hit = 0, shorten(sql)
	return p.kind, true
}

func shorten(sql string) string {
	sql = strings.Join(strings.Fields(sql), " ")
	if len(sql) > 60 {
		sql = sql[:60] + "…"
	}
	return sql
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		link := &link{p: p, client: c, server: s}
		go link.toClient()
		go link.toServer()
	}
}

func (p *Proxy) close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// link is one proxied connection.
type link struct {
	p              *Proxy
	client, server net.Conn
	// muted is set when the answer to a LoseAnswer statement is due: the
	// server's messages from then on are dropped, and the connection cut
	// at the server's next ReadyForQuery (the statement has then run).
	muted atomic.Bool
	once  sync.Once
}

func (l *link) cut() {
	l.once.Do(func() {
		l.client.Close()
		l.server.Close()
	})
}

// Startup and request codes of the untyped first message.
const (
	sslRequest    = 80877103
	gssEncRequest = 80877104
)

// toServer forwards the client's messages, counting statements.
func (l *link) toServer() {
	defer l.cut()
	// The first message has no type byte. An SSL or GSS request is
	// refused (the server's one-byte answer comes through toClient), and
	// the startup message follows.
	for {
		msg, err := readUntyped(l.client)
		if err != nil {
			return
		}
		if _, err := l.server.Write(msg); err != nil {
			return
		}
		if code := binary.BigEndian.Uint32(msg[4:8]); code != sslRequest && code != gssEncRequest {
			break
		}
	}
	stmts := map[string]string{} // prepared statement name → its SQL, from Parse
	var dropping bool            // a refused Bind's messages are dropped through its Sync
	for {
		typ, body, err := readTyped(l.client)
		if err != nil {
			return
		}
		if dropping {
			if typ == 'S' {
				dropping = false
			}
			continue
		}
		var sql string
		switch typ {
		case 'P':
			name, rest, _ := bytes.Cut(body, []byte{0})
			q, _, _ := bytes.Cut(rest, []byte{0})
			stmts[string(name)] = string(q)
		case 'Q':
			sql = string(bytes.TrimRight(body, "\x00"))
		case 'B':
			_, rest, _ := bytes.Cut(body, []byte{0}) // portal
			name, _, _ := bytes.Cut(rest, []byte{0})
			sql = stmts[string(name)]
			if sql == "" {
				sql = "(unnamed statement)"
			}
		}
		if (typ == 'Q' && sql != "-- ping") || typ == 'B' {
			if kind, ok := l.p.count(sql); ok {
				switch kind {
				case Lose:
					return
				case LoseAnswer:
					l.muted.Store(true)
				case Refuse:
					q := refuseQuery
					if typ == 'Q' && strings.EqualFold(strings.TrimSpace(sql), "commit") {
						// A refused COMMIT ends its transaction, rolled back.
						q = "ROLLBACK; " + refuseQuery
					}
					dropping = typ == 'B'
					typ, body = 'Q', append([]byte(q), 0)
				}
			}
		}
		if _, err := l.server.Write(frame(typ, body)); err != nil {
			return
		}
	}
}

// toClient forwards the server's messages until a muted link's statement
// has run.
func (l *link) toClient() {
	defer l.cut()
	first := true
	for {
		if first {
			// The answer to an SSL or GSS request is one byte.
			var b [1]byte
			if _, err := io.ReadFull(l.server, b[:]); err != nil {
				return
			}
			if b[0] == 'N' || b[0] == 'S' || b[0] == 'G' {
				if _, err := l.client.Write(b[:]); err != nil {
					return
				}
				continue
			}
			first = false
			rest, err := readBody(l.server)
			if err != nil {
				return
			}
			if _, err := l.client.Write(frame(b[0], rest)); err != nil {
				return
			}
			continue
		}
		typ, body, err := readTyped(l.server)
		if err != nil {
			return
		}
		if l.muted.Load() {
			if typ == 'Z' {
				return // the statement has run; its answer is lost
			}
			continue
		}
		if _, err := l.client.Write(frame(typ, body)); err != nil {
			return
		}
	}
}

// maxMessage bounds a message's length (the server's own limit is 1 GB;
// tests send far less).
const maxMessage = 64 << 20

func readUntyped(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 8 || size > maxMessage {
		return nil, errors.New("pgfault: bad startup message length")
	}
	msg := make([]byte, size)
	copy(msg, n[:])
	if _, err := io.ReadFull(r, msg[4:]); err != nil {
		return nil, err
	}
	return msg, nil
}

func readTyped(r io.Reader) (byte, []byte, error) {
	var t [1]byte
	if _, err := io.ReadFull(r, t[:]); err != nil {
		return 0, nil, err
	}
	body, err := readBody(r)
	return t[0], body, err
}

func readBody(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 4 || size > maxMessage {
		return nil, errors.New("pgfault: bad message length")
	}
	body := make([]byte, size-4)
	_, err := io.ReadFull(r, body)
	return body, err
}

func frame(typ byte, body []byte) []byte {
	msg := make([]byte, 5+len(body))
	msg[0] = typ
	binary.BigEndian.PutUint32(msg[1:5], uint32(4+len(body)))
	copy(msg[5:], body)
	return msg
}
