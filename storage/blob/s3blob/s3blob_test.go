package s3blob_test

import (
	"testing"

	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/blobtest"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// partSize is S3's smallest part, so that the suite's streamed uploads are
// a few parts of it.
const partSize = 5 << 20

// newStore returns a store on a fresh bucket of cfg's server.
func newStore(t *testing.T, cfg s3test.Config, prefix string) *s3blob.Store {
	t.Helper()
	s, err := s3blob.New(s3blob.Config{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region, Prefix: prefix,
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, PathStyle: true, PartSize: partSize,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestConformance runs the blob-store conformance suite on a real S3
// server: a private versitygw process (the test server's binary), so that
// Down can stop it without disturbing other tests. The store reaches it
// through a proxy that counts the requests: across every upload path of
// the suite (one part and several, hash declared or not, new bytes, bytes
// already held at a key or an address, held bytes gone) not one object is
// copied server-side (issue 32).
func TestConformance(t *testing.T) {
	srv := s3test.StartServer(t)
	proxy := s3test.NewCountingProxy(t, srv.Endpoint())
	blobtest.Run(t, func(t *testing.T) blobtest.Harness {
		return blobtest.Harness{
			Store: newStore(t, proxy.Bucket(srv.Bucket(t)), "gw/"),
			Large: partSize,
			Down:  srv.Stop,
			Up:    srv.Start,
		}
	})
	counts := proxy.Counts()
	t.Logf("requests by operation: %v", counts)
	if counts["CompleteMultipartUpload"] == 0 || counts["PutObject"] == 0 || counts["AbortMultipartUpload"] == 0 {
		t.Fatalf("the proxy did not see the suite's uploads: %v", counts)
	}
	if n := proxy.Copies(); n != 0 {
		t.Errorf("%d server-side copies (CopyObject, UploadPartCopy); want none", n)
	}
}

// putBytes stores data through an upload and returns its object.
func putBytes(t *testing.T, s *s3blob.Store, data []byte) blob.Ref {
	t.Helper()
	u, err := s.NewUpload(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	if _, err := u.Write(data); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	ref, err := u.Publish(nil)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}
