package s3blob_test

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// publicFront is what stands between clients and a store that the gateway
// reaches at an internal address: a reverse proxy on another address (here
// 127.0.0.2) that passes requests on with their Host header unchanged, as
// a CDN or an ingress configured for presigned URLs does.
func publicFront(t *testing.T, endpoint string) string {
	t.Helper()
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target) // keeps the client's Host
	srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: proxy}}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPresignPublicEndpoint: with a public endpoint, presigned URLs name it
// and its signature holds there (the bytes come back through the front),
// not at the internal endpoint, whose host the signature does not cover.
func TestPresignPublicEndpoint(t *testing.T) {
	bucket := s3test.Bucket(t)
	front := publicFront(t, bucket.Endpoint)
	s, err := s3blob.New(s3blob.Config{
		Endpoint: bucket.Endpoint, PublicEndpoint: front, Bucket: bucket.Bucket, Region: bucket.Region,
		AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true, PartSize: partSize,
		PresignTTL: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("bytes a client fetches from the public address")
	ref := putBytes(t, s, data)

	raw, _, err := s.PresignGet(ref, "text/plain")
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if "http://"+u.Host != front {
		t.Fatalf("presigned url %q does not name the public endpoint %s", raw, front)
	}
	body, status := get(t, raw)
	if status != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET through the public front: %d %q", status, body)
	}
	// The same URL at the internal address is refused: the signature is
	// the public host's.
	internal := *u
	internal.Host = mustHost(t, bucket.Endpoint)
	if _, status := get(t, internal.String()); status != http.StatusForbidden {
		t.Fatalf("GET of the public URL at the internal endpoint: %d, want 403", status)
	}
}

// TestPresignWithoutPublicEndpoint: presigned URLs name the endpoint.
func TestPresignWithoutPublicEndpoint(t *testing.T) {
	bucket := s3test.Bucket(t)
	s, err := s3blob.New(s3blob.Config{
		Endpoint: bucket.Endpoint, Bucket: bucket.Bucket, Region: bucket.Region,
		AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true, PresignTTL: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("internal")
	raw, _, err := s.PresignGet(putBytes(t, s, data), "")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(raw)
	if u.Host != mustHost(t, bucket.Endpoint) {
		t.Fatalf("presigned url %q does not name the endpoint", raw)
	}
	if body, status := get(t, raw); status != http.StatusOK || !bytes.Equal(body, data) {
		t.Fatalf("GET: %d %q", status, body)
	}
}

func TestPublicEndpointMustBeABaseURL(t *testing.T) {
	for _, bad := range []string{"cdn.example.com", "ftp://cdn.example.com", "https://cdn.example.com/s3", "https://u:p@cdn.example.com"} {
		_, err := s3blob.New(s3blob.Config{Endpoint: "http://127.0.0.1:1", PublicEndpoint: bad, Bucket: "b"})
		if err == nil {
			t.Errorf("public endpoint %q accepted", bad)
		}
	}
}

func mustHost(t *testing.T, endpoint string) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

func get(t *testing.T, u string) ([]byte, int) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b, resp.StatusCode
}
