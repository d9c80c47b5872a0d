package httpx

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
)

// chunk is one write of a paced body: wait, then send n bytes.
type chunk struct {
	wait time.Duration
	n    int
}

func repeat(c chunk, times int) []chunk {
	out := make([]chunk, times)
	for i := range out {
		out[i] = c
	}
	return out
}

// TestBodyRate sends bodies paced by the schedule over a real connection
// to a server whose handler applies the bound (1000 B/s, 1 s grace) and
// checks the answer: bodies that keep up are read whole, however long they
// take; trickled and stalled ones are cut with 408 request_timeout.
func TestBodyRate(t *testing.T) {
	t.Parallel()
	const rate, grace = 1000, time.Second
	tests := []struct {
		name string
		// off turns the bound off.
		off bool
		// before is how long the handler waits before its first read;
		// after, how long it works once the body has been read (the
		// request's context must stay alive through it).
		before, after time.Duration
		body          []chunk
		want          int
	}{
		{name: "all at once", body: []chunk{{0, 64 << 10}}, want: http.StatusOK},
		{name: "above the rate for three graces", body: repeat(chunk{100 * time.Millisecond, 300}, 30), want: http.StatusOK},
		{name: "a read that starts after the grace", before: 2 * grace, body: []chunk{{0, 4096}}, want: http.StatusOK},
		{name: "work after the body past the grace", after: 2 * grace, body: []chunk{{0, 4096}}, want: http.StatusOK},
		{name: "trickled a byte every 100 ms", body: repeat(chunk{100 * time.Millisecond, 1}, 50), want: http.StatusRequestTimeout},
		{name: "a stall longer than the grace", body: []chunk{{0, 100}, {3 * grace, 100}}, want: http.StatusRequestTimeout},
		{name: "a fast start, then a stall", body: []chunk{{0, 200 << 10}, {3 * grace, 100}}, want: http.StatusRequestTimeout},
		{name: "off", off: true, body: repeat(chunk{100 * time.Millisecond, 1}, 25), want: http.StatusOK},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			bound := BodyRate{Rate: rate, Grace: grace}
			if tc.off {
				bound.Rate = 0
			}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer bound.Apply(w, r)()
				time.Sleep(tc.before)
				body, err := io.ReadAll(r.Body)
				if err != nil {
					e, _ := apierr.As(ReadFailure(err, 1<<30))
					http.Error(w, e.Code, e.Status)
					return
				}
				time.Sleep(tc.after)
				if err := r.Context().Err(); err != nil {
					http.Error(w, "context ended after the body: "+err.Error(), http.StatusInternalServerError)
					return
				}
				fmt.Fprint(w, len(body))
			}))
			t.Cleanup(srv.Close)
			conn, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			br := bufio.NewReader(conn)
			status, text := pacedRequest(t, conn, br, tc.body)
			if status != tc.want {
				t.Fatalf("answer %d %q, want %d", status, text, tc.want)
			}
			total := 0
			for _, c := range tc.body {
				total += c.n
			}
			switch {
			case status == http.StatusOK && text != strconv.Itoa(total):
				t.Fatalf("the handler read %s bytes, want %d", text, total)
			case status == http.StatusRequestTimeout && text != "request_timeout":
				t.Fatalf("408 body %q, want request_timeout", text)
			case status == http.StatusOK:
				// The connection serves its next request after an idle
				// pause longer than the grace: no deadline outlived the body.
				time.Sleep(2 * grace)
				if status, text := pacedRequest(t, conn, br, []chunk{{0, 10}}); status != http.StatusOK || text != "10" {
					t.Fatalf("second request on the connection: %d %q", status, text)
				}
			}
		})
	}
}

// pacedRequest writes a POST whose body follows the schedule and returns
// the answer's status and trimmed body.
func pacedRequest(t *testing.T, conn net.Conn, br *bufio.Reader, body []chunk) (int, string) {
	t.Helper()
	total := 0
	for _, c := range body {
		total += c.n
	}
	go func() {
		fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", total)
		for _, c := range body {
			time.Sleep(c.wait)
			if _, err := conn.Write([]byte(strings.Repeat("x", c.n))); err != nil {
				return // the server cut the body
			}
		}
	}()
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	defer resp.Body.Close()
	text, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(text))
}
