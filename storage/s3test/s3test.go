// Package s3test gives tests their own bucket on the test S3 server that
// tests/run starts (versitygw, see tests/s3-server), and private server
// processes for tests that stop and restart one. Any package's tests may
// import it.
//
// The server is required, not optional: a test that needs it and cannot
// reach it fails with a message naming how to start it.
package s3test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// Environment set by tests/s3-server (and so by tests/run).
const (
	EndpointEnv  = "COMFYGATE_TEST_S3"
	AccessKeyEnv = "COMFYGATE_TEST_S3_ACCESS_KEY"
	SecretKeyEnv = "COMFYGATE_TEST_S3_SECRET_KEY"
	BinEnv       = "COMFYGATE_TEST_S3_BIN"

	howToStart = `run the tests with tests/run, which builds and starts the test S3 server, ` +
		`or run eval "$(tests/s3-server)" in this shell first`
	// reachTimeout bounds the first request to a server.
	reachTimeout = 10 * time.Second
)

// Config is how a test reaches its bucket.
type Config struct {
	Endpoint  string // http://host:port
	Bucket    string
	Region    string
	AccessKey string
	SecretKey string
}

// Client returns a minio client for the bucket's server, for tests that
// look at the bucket directly.
func (c Config) Client(t testing.TB) *minio.Client {
	t.Helper()
	u, err := url.Parse(c.Endpoint)
	if err != nil {
		t.Fatalf("s3test: endpoint %q: %v", c.Endpoint, err)
	}
	client, err := minio.New(u.Host, &minio.Options{
		Creds:        credentials.NewStaticV4(c.AccessKey, c.SecretKey, ""),
		Secure:       u.Scheme == "https",
		Region:       c.Region,
		BucketLookup: minio.BucketLookupPath,
		MaxRetries:   1,
	})
	if err != nil {
		t.Fatalf("s3test: client: %v", err)
	}
	return client
}

// Bucket creates a bucket unique to this test on the shared test server
// and empties and removes it when the test ends.
func Bucket(t testing.TB) Config {
	t.Helper()
	endpoint := os.Getenv(EndpointEnv)
	if endpoint == "" {
		t.Fatalf("s3test: %s is not set: %s", EndpointEnv, howToStart)
	}
	cfg := Config{
		Endpoint:  endpoint,
		Region:    "us-east-1",
		AccessKey: os.Getenv(AccessKeyEnv),
		SecretKey: os.Getenv(SecretKeyEnv),
	}
	return newBucket(t, cfg)
}

// newBucket creates a fresh bucket on cfg's server.
func newBucket(t testing.TB, cfg Config) Config {
	t.Helper()
	cfg.Bucket = bucketName(t)
	client := cfg.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	if err := client.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
		t.Fatalf("s3test: create bucket %s at %s: %v; %s", cfg.Bucket, cfg.Endpoint, err, howToStart)
	}
	t.Cleanup(func() { removeBucket(t, client, cfg.Bucket) })
	return cfg
}

// removeBucket aborts the bucket's multipart uploads, deletes its objects
// and the bucket. Failures are logged: the name is unique, so leftovers
// cannot disturb another test.
func removeBucket(t testing.TB, client *minio.Client, bucket string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for up := range client.ListIncompleteUploads(ctx, bucket, "", true) {
		if up.Err != nil {
			t.Logf("s3test: list uploads of %s: %v", bucket, up.Err)
			return
		}
		_ = client.RemoveIncompleteUpload(ctx, bucket, up.Key)
	}
	objects := client.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true})
	for res := range client.RemoveObjects(ctx, bucket, objects, minio.RemoveObjectsOptions{}) {
		t.Logf("s3test: remove %s/%s: %v", bucket, res.ObjectName, res.Err)
	}
	if err := client.RemoveBucket(ctx, bucket); err != nil {
		t.Logf("s3test: remove bucket %s: %v", bucket, err)
	}
}

var notBucketChar = regexp.MustCompile(`[^a-z0-9-]+`)

// bucketName is a valid, unique bucket name derived from the test's name.
func bucketName(t testing.TB) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := strings.Trim(notBucketChar.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(name) > 40 {
		name = name[:40]
	}
	return strings.Trim(fmt.Sprintf("t-%s-%s", name, hex.EncodeToString(b[:])), "-")
}

// Keys lists the bucket's object keys under prefix and its incomplete
// multipart uploads there (as "<key>?uploadId=<id>").
func (c Config) Keys(t testing.TB, prefix string) []string {
	t.Helper()
	client := c.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), reachTimeout)
	defer cancel()
	var keys []string
	for obj := range client.ListObjects(ctx, c.Bucket, minio.ListObjectsOptions{Prefix: prefix, Recursive: true}) {
		if obj.Err != nil {
			t.Fatalf("s3test: list %s/%s: %v", c.Bucket, prefix, obj.Err)
		}
		keys = append(keys, obj.Key)
	}
	core := minio.Core{Client: client}
	res, err := core.ListMultipartUploads(ctx, c.Bucket, prefix, "", "", "", 1000)
	if err != nil {
		t.Fatalf("s3test: list uploads of %s/%s: %v", c.Bucket, prefix, err)
	}
	for _, up := range res.Uploads {
		keys = append(keys, up.Key+"?uploadId="+up.UploadID)
	}
	return keys
}

// Caddyfile is the comfygate option `blobs s3 { … }` for the bucket, with
// extra lines (presign, part_size, prefix) added to its block, indented for
// the test gateways' global options.
func (c Config) Caddyfile(extra ...string) string {
	lines := []string{
		"endpoint " + c.Endpoint, "bucket " + c.Bucket, "region " + c.Region,
		"access_key " + c.AccessKey, "secret_key " + c.SecretKey, "path_style",
	}
	return "blobs s3 {\n\t\t\t" + strings.Join(append(lines, extra...), "\n\t\t\t") + "\n\t\t}"
}
