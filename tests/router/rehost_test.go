package router

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/internal/router/rehost"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// rehostGateway is a gateway serving the router and, behind the same JWT
// auth, the asset API that rehosted results are read from.
func rehostGateway(t *testing.T, global, catalogPath string, options ...string) *gateway.Gateway {
	t.Helper()
	auth := `comfy_auth jwt {
			key HS256 secret ` + jwtSecret + `
		}`
	cfg := `{
	admin off
	grace_period 1s
	comfygate {
		` + global + `
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/* /v2/models /v2/models/*
	route @router {
		error_envelope router
		` + auth + `
		model_router {
			catalog ` + catalogPath + `
			public_base https://router.test
			allow_insecure_upstreams
			` + strings.Join(options, "\n\t\t\t") + `
		}
	}
	route /api/v2/* {
		error_envelope
		` + auth + `
		comfy_assets
		error "not found" 404
	}
}
`
	client.CloseIdleConnections()
	return gateway.Start(t, cfg, gateway.Options{})
}

func writeCatalog(t *testing.T, entries ...map[string]any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"models": entries})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "catalog.json")
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// getBytes reads url with the caller's token.
func getBytes(t *testing.T, url, tok string) response {
	t.Helper()
	r, err := send(context.Background(), http.MethodGet, url, tok, nil, nil)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return r
}

// assetID is the id in a content URL under base.
func assetID(t *testing.T, base, url string) string {
	t.Helper()
	rest, ok := strings.CutPrefix(url, base+"/api/v2/assets/")
	id, ok2 := strings.CutSuffix(rest, "/content")
	if !ok || !ok2 || id == "" {
		t.Fatalf("%q is not a content URL of %s", url, base)
	}
	return id
}

// TestRehostResults: a BFL-like partner whose result URL expires after 2 s
// and a partner answering base64 (acceptance 1); a replay on the other
// replica answers the same URLs and renews nothing, and the copies expire
// at the configured lifetime (acceptance 3). Two gateways share one
// Postgres database and one blob store: a shared directory, or an S3
// bucket that presigns (the content URL then redirects to a fresh
// presigned URL).
func TestRehostResults(t *testing.T) {
	t.Run("file_system", func(t *testing.T) {
		dir := t.TempDir()
		testRehostResults(t, "blobs file_system "+dir, blob.NewFileSystem(dir))
	})
	t.Run("s3_presign", func(t *testing.T) {
		bucket := s3test.Bucket(t)
		st, err := s3blob.New(s3blob.Config{Endpoint: bucket.Endpoint, Bucket: bucket.Bucket, Region: bucket.Region,
			AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true})
		if err != nil {
			t.Fatal(err)
		}
		testRehostResults(t, bucket.Caddyfile("presign 10m"), st)
	})
}

func testRehostResults(t *testing.T, blobsOption string, blobs blob.Store) {
	const bflSize, lifetime = 4096, time.Hour
	bfl := partner.NewBFL(t, partner.WithMediaExpiry(2*time.Second), partner.WithMediaSize(bflSize))
	b64 := partner.NewSyncJSON(t, partner.WithBase64Media())
	cat := writeCatalog(t,
		map[string]any{"id": "bfl/flux-pro", "adapter": "bfl", "upstream": bfl.URL + "/v1/flux-pro-1.1", "credential": partner.DefaultSecret,
			"poll_interval": "100ms", "rehost": map[string]any{"urls": []string{"result.sample"}, "lifetime": "1h"}},
		map[string]any{"id": "openai/gpt-image-1", "adapter": "http", "upstream": b64.URL + "/v1/images/generations", "credential": partner.DefaultSecret},
	)
	dsn := pgtest.DSN(t)
	global := fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s", dsn, pgtest.RedisURL(t), blobsOption)
	options := []string{"rehost openai {\n\t\t\t\tbase64 images[*].b64_json\n\t\t\t\tlifetime 3s\n\t\t\t}",
		"rehost_allow_private", "redis_prefix " + pgtest.KeyPrefix(t)}
	g1 := rehostGateway(t, global, cat, options...)
	g2 := rehostGateway(t, global, cat, options...)
	tok := token(t, claims{ws: "ws-rehost"})

	// BFL: the answer names a copy on the gateway, not the partner's URL.
	first := call(t, http.MethodPost, g1.URL+"/v1/models/bfl/flux-pro", tok, []byte(`{"prompt":"a fox"}`),
		map[string]string{"Idempotency-Key": "rehost-1"})
	if first.Status != http.StatusOK || first.Header.Get(rehost.HeaderFailed) != "" {
		t.Fatalf("call: %d %s %v", first.Status, first.Body, first.Header)
	}
	var ans struct {
		ID     string
		Result struct{ Sample string }
	}
	if err := jsonUnmarshal(first.Body, &ans); err != nil {
		t.Fatal(err)
	}
	id := assetID(t, g1.URL, ans.Result.Sample)
	want := partner.MediaBytes(ans.ID, bflSize)

	// After the partner's URL expired, both replicas serve the exact bytes.
	time.Sleep(2500 * time.Millisecond)
	for _, g := range []*gateway.Gateway{g1, g2} {
		r := getBytes(t, g.URL+"/api/v2/assets/"+id+"/content", tok)
		if r.Status != http.StatusOK || !bytes.Equal(r.Body, want) {
			t.Fatalf("%s: content %d, %d bytes (want %d)", g.URL, r.Status, len(r.Body), len(want))
		}
	}
	// Only the caller's account sees it.
	if r := getBytes(t, g2.URL+"/api/v2/assets/"+id+"/content", token(t, claims{ws: "someone-else"})); r.Status != http.StatusNotFound {
		t.Fatalf("another account reads the copy: %d", r.Status)
	}
	meta := getBytes(t, g1.URL+"/api/v2/assets/"+id, tok).json(t)
	created, _ := time.Parse(time.RFC3339Nano, meta["created_at"].(string))
	expires, _ := time.Parse(time.RFC3339Nano, meta["expires_at"].(string))
	if d := expires.Sub(created); d < lifetime-time.Minute || d > lifetime+time.Minute {
		t.Fatalf("the copy lives %s, want %s (%v)", d, lifetime, meta)
	}
	if meta["job_id"] != nil || !strings.Contains(fmt.Sprint(meta["tags"]), rehost.Tag) ||
		!strings.Contains(fmt.Sprint(meta["tags"]), rehost.TagCallPrefix) {
		t.Fatalf("asset metadata %v", meta)
	}

	// A replay on the other replica answers the same URLs and renews nothing.
	replay := call(t, http.MethodPost, g2.URL+"/v1/models/bfl/flux-pro", tok, []byte(`{"prompt":"a fox"}`),
		map[string]string{"Idempotency-Key": "rehost-1"})
	if replay.Status != http.StatusOK || !bytes.Equal(replay.Body, first.Body) || replay.Header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("replay: %d %s (first %s)", replay.Status, replay.Body, first.Body)
	}
	again := getBytes(t, g1.URL+"/api/v2/assets/"+id, tok).json(t)
	if again["expires_at"] != meta["expires_at"] {
		t.Fatalf("the replay renewed the copy: %v then %v", meta["expires_at"], again["expires_at"])
	}
	if n := bfl.Submissions(); n != 1 {
		t.Fatalf("%d submissions to the partner", n)
	}

	// base64: the payload becomes a URL of the copy, which expires at the
	// configured 3 s and is then removed by the expiry sweep.
	r := call(t, http.MethodPost, g2.URL+"/v1/models/openai/gpt-image-1", tok, []byte(`{"prompt":"a cat"}`), nil)
	if r.Status != http.StatusOK || r.Header.Get(rehost.HeaderFailed) != "" {
		t.Fatalf("base64 call: %d %s", r.Status, r.Body)
	}
	var img struct {
		Images []map[string]any
	}
	if err := jsonUnmarshal(r.Body, &img); err != nil || len(img.Images) != 1 {
		t.Fatalf("base64 answer %s", r.Body)
	}
	u, _ := img.Images[0]["b64_json"].(string)
	bid := assetID(t, g2.URL, u)
	if c := getBytes(t, g1.URL+"/api/v2/assets/"+bid+"/content", tok); c.Status != http.StatusOK || !bytes.Equal(c.Body, partner.MediaBytes("", 0)) {
		t.Fatalf("base64 copy: %d %q", c.Status, c.Body)
	}
	bmeta := getBytes(t, g1.URL+"/api/v2/assets/"+bid, tok).json(t)
	if bmeta["content_type"] != "image/png" {
		t.Fatalf("base64 copy metadata %v", bmeta)
	}
	time.Sleep(3500 * time.Millisecond)
	if c := getBytes(t, g1.URL+"/api/v2/assets/"+bid+"/content", tok); c.Status != http.StatusNotFound {
		t.Fatalf("expired copy: %d", c.Status)
	}
	st, err := postgres.Open(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The gateways sweep every minute; run the same sweep now.
	svc := &assets.Service{Store: st, Blobs: blobs}
	if _, err := svc.SweepExpired(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetAsset(context.Background(), "ws-rehost", bid); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("after the expiry sweep: %v", err)
	}
	// The BFL copy, within its lifetime, is still there.
	if _, err := st.GetAsset(context.Background(), "ws-rehost", id); err != nil {
		t.Fatalf("the live copy: %v", err)
	}
}

// refusedListener counts connections made to it.
func refusedListener(t *testing.T, handler http.Handler) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := new(atomic.Int64)
	srv := &http.Server{Handler: handler, ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String(), n
}

// TestRehostFailuresKeepPartnerURL (acceptance 2): a result at a loopback
// or private address, one too large and one that times out: the call
// succeeds with the partner's URL, Comfygate-Rehost-Failed counts it, and
// no connection is made to a refused address.
func TestRehostFailuresKeepPartnerURL(t *testing.T) {
	media := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(partner.MediaBytes("x", 0)) })
	loop, loopConns := refusedListener(t, media)
	slow, _ := refusedListener(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(30 * time.Second):
		}
	}))
	bfl := partner.NewBFL(t)
	cat := writeCatalog(t, map[string]any{"id": "bfl/flux-pro", "adapter": "bfl", "upstream": bfl.URL + "/v1/flux-pro-1.1",
		"credential": partner.DefaultSecret, "poll_interval": "50ms", "rehost": map[string]any{"urls": []string{"result.sample"}}})
	strict := rehostGateway(t, "storage embedded ./data", cat)
	lenient := rehostGateway(t, "storage embedded ./data", cat, "rehost_allow_private", "rehost_max_size 1KiB", "rehost_timeout 1s")
	tok := token(t, claims{ws: "ws-refused"})
	for _, tc := range []struct {
		name string
		g    *gateway.Gateway
		opts []partner.Option
		url  string // the result URL the partner answers; "" = its own
	}{
		{"loopback", strict, nil, loop + "/r.png"},
		{"localhost name", strict, nil, strings.Replace(loop, "127.0.0.1", "localhost", 1) + "/r.png"},
		{"private", strict, nil, "http://10.255.255.1/r.png"},
		{"link-local metadata", strict, nil, "http://169.254.169.254/latest/meta-data"},
		{"partner on loopback", strict, nil, ""},
		{"too large", lenient, []partner.Option{partner.WithMediaSize(5000)}, ""},
		{"timeout", lenient, nil, slow + "/r.png"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := append([]partner.Option{partner.WithNoFaults()}, tc.opts...)
			if tc.url != "" {
				opts = append(opts, partner.WithMediaURL(tc.url))
			}
			bfl.SetOptions(opts...)
			start := time.Now()
			key := map[string]string{"Idempotency-Key": "refused-" + tc.name}
			r := call(t, http.MethodPost, tc.g.URL+"/v1/models/bfl/flux-pro", tok, []byte(`{"prompt":"x"}`), key)
			var ans struct{ Result struct{ Sample string } }
			if err := jsonUnmarshal(r.Body, &ans); err != nil || r.Status != http.StatusOK {
				t.Fatalf("call: %d %s", r.Status, r.Body)
			}
			if got := r.Header.Get(rehost.HeaderFailed); got != "1" {
				t.Fatalf("%s = %q, want 1", rehost.HeaderFailed, got)
			}
			if tc.url != "" && ans.Result.Sample != tc.url || !strings.HasPrefix(ans.Result.Sample, "http://") ||
				strings.Contains(ans.Result.Sample, "/api/v2/assets/") {
				t.Fatalf("sample %q, want the partner's %q", ans.Result.Sample, tc.url)
			}
			if d := time.Since(start); d > 20*time.Second {
				t.Fatalf("the call took %s", d)
			}
			// A replay of the call answers the same body and header.
			again := call(t, http.MethodPost, tc.g.URL+"/v1/models/bfl/flux-pro", tok, []byte(`{"prompt":"x"}`), key)
			if again.Status != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" || !bytes.Equal(again.Body, r.Body) {
				t.Fatalf("replay: %d replayed=%q %s, want 200, true and the first answer %s",
					again.Status, again.Header.Get("Idempotent-Replayed"), again.Body, r.Body)
			}
			if got := again.Header.Get(rehost.HeaderFailed); got != "1" {
				t.Fatalf("replay: %s = %q, want 1", rehost.HeaderFailed, got)
			}
		})
	}
	if n := loopConns.Load(); n != 0 {
		t.Fatalf("%d connections reached the refused loopback address", n)
	}
}

// TestRehostCollectedAfterDeadline: a generation that outlived the
// deadline is copied when it is collected, so the same-key retry that
// collects it answers the gateway's URL.
func TestRehostCollectedAfterDeadline(t *testing.T) {
	const size = 2000
	bfl := partner.NewBFL(t, partner.WithLatency(1500*time.Millisecond), partner.WithMediaSize(size))
	cat := writeCatalog(t, map[string]any{"id": "bfl/slow", "adapter": "bfl", "upstream": bfl.URL + "/v1/flux-pro",
		"credential": partner.DefaultSecret, "deadline": "1s", "poll_interval": "100ms",
		"rehost": map[string]any{"urls": []string{"result.sample"}}})
	g := rehostGateway(t, "storage embedded ./data", cat, "rehost_allow_private")
	tok := token(t, claims{ws: "ws-collect"})
	key := map[string]string{"Idempotency-Key": "collect-rehost"}
	first := call(t, http.MethodPost, g.URL+"/v1/models/bfl/slow", tok, []byte(`{"prompt":"x"}`), key)
	wantBucket(t, "first", first, http.StatusGatewayTimeout, "deadline_exceeded")
	var last response
	for range 10 {
		if last = call(t, http.MethodPost, g.URL+"/v1/models/bfl/slow", tok, []byte(`{"prompt":"x"}`), key); last.Status != 504 {
			break
		}
	}
	var ans struct {
		ID     string
		Result struct{ Sample string }
	}
	if err := jsonUnmarshal(last.Body, &ans); err != nil || last.Status != http.StatusOK {
		t.Fatalf("collect: %d %s", last.Status, last.Body)
	}
	id := assetID(t, g.URL, ans.Result.Sample)
	if r := getBytes(t, g.URL+"/api/v2/assets/"+id+"/content", tok); r.Status != http.StatusOK ||
		!bytes.Equal(r.Body, partner.MediaBytes(ans.ID, size)) {
		t.Fatalf("content: %d, %d bytes", r.Status, len(r.Body))
	}
}
