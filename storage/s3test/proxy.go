package s3test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// CountingProxy is a reverse proxy in front of an S3 server that counts
// the requests passing through it by S3 operation, so that a test can
// assert what a client sends: for instance that no upload path copies an
// object server-side (CopyObject, UploadPartCopy). It passes the Host
// header on unchanged, so signatures made for its address hold.
type CountingProxy struct {
	// URL is the proxy's base URL: the endpoint to configure instead of
	// the server's.
	URL string

	mu  sync.Mutex
	ops map[string]int
}

// NewCountingProxy starts a proxy to endpoint, stopped when the test ends.
func NewCountingProxy(t testing.TB, endpoint string) *CountingProxy {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatalf("s3test: endpoint %q: %v", endpoint, err)
	}
	p := &CountingProxy{ops: map[string]int{}}
	proxy := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := Operation(r)
		p.mu.Lock()
		p.ops[op]++
		p.mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// Bucket is cfg reached through the proxy.
func (p *CountingProxy) Bucket(cfg Config) Config {
	cfg.Endpoint = p.URL
	return cfg
}

// Count is how many requests of op (an S3 operation name, as Operation
// returns it) passed.
func (p *CountingProxy) Count(op string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ops[op]
}

// Counts is every operation's count so far.
func (p *CountingProxy) Counts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]int, len(p.ops))
	for k, v := range p.ops {
		out[k] = v
	}
	return out
}

// Copies is how many server-side copies (CopyObject, UploadPartCopy)
// passed.
func (p *CountingProxy) Copies() int { return p.Count("CopyObject") + p.Count("UploadPartCopy") }

// Operation names the S3 operation of a path-style request, from its
// method, query and the copy source header (which makes a PUT a copy).
func Operation(r *http.Request) string {
	q := r.URL.Query()
	has := func(k string) bool { _, ok := q[k]; return ok }
	copySource := r.Header.Get("X-Amz-Copy-Source") != ""
	switch r.Method {
	case http.MethodPut:
		switch {
		case copySource && has("uploadId"):
			return "UploadPartCopy"
		case copySource:
			return "CopyObject"
		case has("uploadId"):
			return "UploadPart"
		}
		return "PutObject"
	case http.MethodPost:
		switch {
		case has("uploads"):
			return "CreateMultipartUpload"
		case has("uploadId"):
			return "CompleteMultipartUpload"
		case has("delete"):
			return "DeleteObjects"
		}
	case http.MethodDelete:
		if has("uploadId") {
			return "AbortMultipartUpload"
		}
		return "DeleteObject"
	case http.MethodGet:
		switch {
		case has("list-type"):
			return "ListObjectsV2"
		case has("uploads"):
			return "ListMultipartUploads"
		case has("uploadId"):
			return "ListParts"
		}
		return "GetObject"
	case http.MethodHead:
		return "HeadObject"
	}
	return r.Method + " other"
}
