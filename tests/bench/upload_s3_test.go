package bench

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
)

// s3Global is the comfygate option of a gateway on Postgres + Redis with
// its blobs in bucket (the replicas' setup), at the default part size.
func s3Global(t *testing.T, bucket s3test.Config) string {
	return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\t%s\n\t\tmax_upload_size 2GiB",
		pgtest.DSN(t), pgtest.RedisURL(t), bucket.Caddyfile())
}

// s3UploadTargets are the S3 targets of the upload benchmark, on a bucket
// of the test S3 server: the file sent straight to the server, as one
// PutObject request by curl and by minio-go's PutObject (the client library
// the gateway uses; with its defaults a 100 MiB file goes as a parallel
// multipart upload), both signed the way the gateway signs its part uploads
// (UNSIGNED-PAYLOAD); and the file uploaded through a gateway without and
// with expected_hash (what the SDKs send).
func s3UploadTargets(t *testing.T) []uploadTarget {
	bucket := s3test.Bucket(t)
	g, _ := startGateway(t, s3Global(t, bucket))
	url := g.URL + "/api/v2/assets"
	client := bucket.Client(t)
	puts := 0
	return []uploadTarget{
		{name: "s3 direct", write: func(t *testing.T, f string) float64 {
			puts++
			return curlPutS3(t, bucket, fmt.Sprintf("direct/%d", puts), f)
		}},
		{name: "s3 minio-go PutObject", write: func(t *testing.T, f string) float64 {
			puts++
			return minioPut(t, client, bucket.Bucket, fmt.Sprintf("direct/%d", puts), f)
		}},
		{name: "s3 gateway", write: func(t *testing.T, f string) float64 { return curlUpload(t, url, f) }},
		{name: "s3 gateway, expected_hash", write: func(t *testing.T, f string) float64 {
			return curlUpload(t, url, f, "expected_hash="+fileHash(t, f))
		}},
	}
}

// curlPutS3 PUTs path as the object key of bucket with curl's SigV4 and
// returns the seconds curl reports.
func curlPutS3(t *testing.T, bucket s3test.Config, key, path string) float64 {
	t.Helper()
	url := bucket.Endpoint + "/" + bucket.Bucket + "/" + key
	return curlSeconds(t, url, []string{"-sS", "-o", "/dev/null", "-H", "Expect:",
		"-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD",
		"--aws-sigv4", "aws:amz:" + bucket.Region + ":s3", "--user", bucket.AccessKey + ":" + bucket.SecretKey,
		"-T", path, "-w", "%{http_code} %{time_total}", url}, 200)
}

// minioPut uploads path with minio-go's PutObject (default part size and
// parallelism) and returns the seconds it took.
func minioPut(t *testing.T, client *minio.Client, bucket, key, path string) float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := client.PutObject(context.Background(), bucket, key, f, st.Size(),
		minio.PutObjectOptions{DisableContentSha256: true}); err != nil {
		t.Fatalf("PutObject: %v", err)
	}
	return time.Since(start).Seconds()
}

// fileHash is the blake3 address of a file's bytes.
func fileHash(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := blake3.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return "blake3:" + hex.EncodeToString(h.Sum(nil))
}
