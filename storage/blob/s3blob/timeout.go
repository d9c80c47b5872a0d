package s3blob

import (
	"context"
	"net"
	"time"
)

// DefaultTimeout is how long a connection to the store may make no
// progress before its request fails (see Config.Timeout).
const DefaultTimeout = 10 * time.Second

// progressDialer dials connections that fail an operation once timeout
// passes without a byte sent or received: a store that goes silent (a
// blackholed network, a hung server) fails the request in flight within
// timeout instead of after TCP's own timeouts, minutes later, while a slow
// transfer that keeps moving is never cut.
type progressDialer struct {
	dialer  net.Dialer
	timeout time.Duration
}

func (d *progressDialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	c, err := d.dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &progressConn{Conn: c, timeout: d.timeout}, nil
}

// progressConn pushes both deadlines out by timeout before every read and
// write. Setting both from either side matters: the HTTP transport keeps a
// read pending on a connection while it writes the request, and writing
// must count as progress for that read too.
type progressConn struct {
	net.Conn
	timeout time.Duration
}

func (c *progressConn) Read(p []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(p)
}

func (c *progressConn) Write(p []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(p)
}
