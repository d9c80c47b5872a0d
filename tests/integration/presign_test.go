package integration

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestPresignPublicEndpoint covers issue 26 item 7: the gateway reaches
// its store at an internal address, and clients reach the store through a
// front of their own (here a reverse proxy on 127.0.0.2 that passes the
// Host header on, as a CDN or ingress for presigned URLs does). With
// public_endpoint the asset's url and the content route's 302 name the
// front, and the bytes come back through it: the signature is the public
// host's.
func TestPresignPublicEndpoint(t *testing.T) {
	t.Parallel()
	bucket := s3test.Bucket(t)
	target, err := url.Parse(bucket.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatal(err)
	}
	front := &httptest.Server{Listener: l, Config: &http.Server{Handler: httputil.NewSingleHostReverseProxy(target)}}
	front.Start()
	t.Cleanup(front.Close)

	g := gateway.Start(t, siteConfig(fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 4MiB",
		pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile("presign 10m", "public_endpoint "+front.URL)),
		"comfy_auth none"), gateway.Options{})

	data := randomBytes(70_000)
	up := upload(t, g, nil, uploadParts(data, "public.png")...)
	if up.Status != http.StatusCreated {
		t.Fatalf("upload: %d %s", up.Status, up.Body)
	}
	asset := up.JSON(t)
	fetchPublic := func(what, raw string) {
		t.Helper()
		if !strings.HasPrefix(raw, front.URL+"/"+bucket.Bucket+"/") {
			t.Fatalf("%s %q does not name the public endpoint %s", what, raw, front.URL)
		}
		r := fetchDirect(t, raw)
		if !bytes.Equal(r.Body, data) {
			t.Fatalf("%s serves %d other bytes", what, len(r.Body))
		}
		// The same path and query at the internal address is refused:
		// the URL was signed for the public host.
		u, _ := url.Parse(raw)
		u.Host = target.Host
		if r := gateway.Do(t, http.MethodGet, u.String(), nil, nil); r.Status != http.StatusForbidden {
			t.Errorf("%s at the internal endpoint: %d, want 403", what, r.Status)
		}
	}
	fetchPublic("the asset's url", asset["url"].(string))

	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Get(g.URL + "/api/v2/assets/" + asset["id"].(string) + "/content")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("GET content with presign: %d", resp.StatusCode)
	}
	fetchPublic("the content route's 302", resp.Header.Get("Location"))
}
