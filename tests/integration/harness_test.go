package integration

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// backend is one storage configuration the API tests run against.
type backend struct {
	name string
	// global is the comfygate global option body for a gateway working in dir.
	global func(t *testing.T, dir string) string
	// remoteBlobs is set for a blob store that stages small uploads in
	// memory, not where a test can watch them arrive (s3 below one part).
	remoteBlobs bool
}

// backends returns embedded, postgres+redis, and postgres+redis with blobs
// in a bucket of the test S3 server. Both postgres gateways of a test share
// one schema when the test starts two of them.
func backends() []backend {
	return []backend{
		{name: "embedded", global: func(t *testing.T, dir string) string {
			return "storage embedded ./data\n\t\tmax_upload_size 4MiB"
		}},
		{name: "postgres", global: func(t *testing.T, dir string) string {
			return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\tblobs file_system ./data/blobs\n\t\tmax_upload_size 4MiB",
				pgtest.DSN(t), pgtest.RedisURL(t))
		}},
		{name: "s3", remoteBlobs: true, global: func(t *testing.T, dir string) string {
			bucket := s3test.Bucket(t)
			s3Buckets.Store(dir, bucket)
			t.Cleanup(func() { s3Buckets.Delete(dir) })
			return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 4MiB",
				pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile())
		}},
	}
}

// s3Buckets maps the directory of a gateway of the s3 backend to its
// bucket, for blobFiles.
var s3Buckets sync.Map // string → s3test.Config

// siteConfig is a v2 gateway with the given auth directive.
func siteConfig(global, auth string) string {
	return gateway.V2Config(global, gateway.V2Site{Auth: auth})
}

// startGateway runs a gateway for b with auth none.
func startGateway(t *testing.T, b backend) *gateway.Gateway {
	t.Helper()
	dir := t.TempDir()
	return gateway.Start(t, siteConfig(b.global(t, dir), "comfy_auth none"), gateway.Options{Dir: dir})
}

// part is one multipart part, sent in order.
type part struct {
	name, filename, value string
	data                  []byte
}

func multipartBody(t *testing.T, parts ...part) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		if p.filename != "" {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q; filename=%q`, p.name, p.filename))
			h.Set("Content-Type", "application/octet-stream")
		} else {
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name=%q`, p.name))
		}
		pw, err := w.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if p.filename != "" {
			pw.Write(p.data)
		} else {
			io.WriteString(pw, p.value)
		}
	}
	w.Close()
	return &buf, w.FormDataContentType()
}

// uploadParts is the usual metadata-then-file body.
func uploadParts(data []byte, filePath string, extra ...part) []part {
	ps := []part{{name: "content_type", value: "image/png"}, {name: "file_path", value: filePath}}
	ps = append(ps, extra...)
	return append(ps, part{name: "file", filename: filepath.Base(filePath), data: data})
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func hashOf(b []byte) string {
	s := blake3.Sum256(b)
	return fmt.Sprintf("blake3:%x", s[:])
}

// response is a whole response from a v2 gateway.
type response struct{ gateway.Response }

func (r response) errorCode(t *testing.T) string {
	t.Helper()
	m := r.JSON(t)
	e, ok := m["error"].(map[string]any)
	if !ok {
		t.Fatalf("status %d: no error envelope in %s", r.Status, r.Body)
	}
	if _, ok := e["message"].(string); !ok {
		t.Fatalf("error envelope without message: %s", r.Body)
	}
	if _, ok := e["details"]; !ok {
		t.Fatalf("error envelope without details key: %s", r.Body)
	}
	code, _ := e["code"].(string)
	return code
}

// do sends one request to a v2 gateway, which must answer with X-Request-Id.
func do(t *testing.T, method, url string, body io.Reader, header map[string]string) response {
	t.Helper()
	r := gateway.Do(t, method, url, body, header)
	if r.Header.Get("X-Request-Id") == "" {
		t.Errorf("%s %s: response without X-Request-Id", method, url)
	}
	return response{r}
}

func upload(t *testing.T, g *gateway.Gateway, header map[string]string, parts ...part) response {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	h := map[string]string{"Content-Type": ct}
	for k, v := range header {
		h[k] = v
	}
	return do(t, http.MethodPost, g.URL+"/api/v2/assets", body, h)
}

// blobFiles lists the files under the gateway's blob objects and tmp dirs,
// or for an s3 gateway: for "objects" the objects of both layouts
// (blobs/<key> and objects/ab/cd/<hex>), for "tmp" what an upload in
// progress or left behind holds (incomplete multipart uploads anywhere,
// and temp objects under tmp/).
func blobFiles(t *testing.T, g *gateway.Gateway, sub string) []string {
	t.Helper()
	if bucket, ok := s3Buckets.Load(g.Dir); ok {
		var out []string
		for _, k := range bucket.(s3test.Config).Keys(t, "") {
			upload := strings.Contains(k, "?uploadId=")
			if sub == "tmp" && (upload || strings.HasPrefix(k, "tmp/")) ||
				sub == "objects" && !upload && !strings.HasPrefix(k, "tmp/") {
				out = append(out, k)
			}
		}
		return out
	}
	var files []string
	root := filepath.Join(g.Dir, "data", "blobs", sub)
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			files = append(files, strings.TrimPrefix(p, root))
		}
		return nil
	})
	return files
}

// createKey mints an API key with the CLI against the gateway's config.
func createKey(t *testing.T, g *gateway.Gateway, account string) string {
	return gateway.CreateAPIKey(t, g, account)
}
