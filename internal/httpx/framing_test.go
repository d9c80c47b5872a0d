package httpx

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCloseAfterChunked sends, on one connection, a request framed both by
// Transfer-Encoding and by Content-Length followed by a second request: the
// second must never be answered (the connection closes after the first).
// A request with a Content-Length alone keeps its connection.
func TestCloseAfterChunked(t *testing.T) {
	var mu sync.Mutex
	var served []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		CloseAfterChunked(w, r)
		_, _ = io.Copy(io.Discard, r.Body)
		mu.Lock()
		served = append(served, r.URL.Path)
		mu.Unlock()
	}))
	defer srv.Close()
	tests := []struct {
		name       string
		first      string
		wantServed []string
	}{
		{"chunked with a Content-Length", "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", []string{"/first"}},
		{"chunked alone", "POST /first HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nab\r\n0\r\n\r\n", []string{"/first"}},
		{"Content-Length alone", "POST /first HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nab", []string{"/first", "/second"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			served = nil
			mu.Unlock()
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := io.WriteString(c, tc.first+"GET /second HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(c)
			answers := 0
			for {
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					break
				}
				resp.Body.Close()
				answers++
			}
			// Read to the end: the server closed the connection (after the
			// first answer, or after the second, which asked for it).
			mu.Lock()
			defer mu.Unlock()
			if answers != len(tc.wantServed) || strings.Join(served, ",") != strings.Join(tc.wantServed, ",") {
				t.Errorf("%d answers, served %v; want %v", answers, served, tc.wantServed)
			}
		})
	}
}

func TestCanonicalPath(t *testing.T) {
	for p, want := range map[string]bool{
		"/":                                 true,
		"/api/v2/jobs":                      true,
		"/api/v2/jobs/":                     true,
		"/deployment/demo/../x/api/v2/jobs": false,
		"/deployment/demo/./api/v2/jobs":    false,
		"/deployment/demo//api/v2/jobs":     false,
		"//api/v2/jobs":                     false,
		"/api/v2/..":                        false,
		"/api/v2/.":                         false,
		"/api/v2/jobs/..hidden":             true, // a name, not a dot segment
		"api/v2/jobs":                       false,
		"":                                  false,
	} {
		if got := CanonicalPath(p); got != want {
			t.Errorf("CanonicalPath(%q) = %v, want %v", p, got, want)
		}
	}
}
