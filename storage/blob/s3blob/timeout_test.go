package s3blob_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"net"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// silentServer accepts connections, reads whatever arrives and never
// answers: a hung store, or one behind a network that drops its replies.
func silentServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
			go io.Copy(io.Discard, c)
		}
	}()
	return "http://" + l.Addr().String()
}

// TestSilentStoreFails: against a store that never answers, reads and
// uploads fail with a store error (not "missing", and not a hang).
func TestSilentStoreFails(t *testing.T) {
	s, err := s3blob.New(s3blob.Config{Endpoint: silentServer(t), Bucket: "bucket", AccessKey: "k", SecretKey: "s",
		PathStyle: true, PartSize: partSize, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// The test's own bound: far above (retries+1) × Timeout, so that only
	// a request that never gives up trips it.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	hash := "blake3:" + string(bytes.Repeat([]byte("ab"), 32))
	if _, err := s.Stat(ctx, blob.Ref{Hash: hash}); !isTimeout(err) || errors.Is(err, fs.ErrNotExist) || ctx.Err() != nil {
		t.Fatalf("Stat on a silent store: %v, want a timeout (test context: %v)", err, ctx.Err())
	}
	u, err := s.NewUpload(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	_, werr := u.ReadFrom(bytes.NewReader(make([]byte, 3*partSize)))
	_, _, ferr := u.Finish()
	if !isTimeout(werr) && !isTimeout(ferr) || ctx.Err() != nil {
		t.Fatalf("upload to a silent store: write %v, finish %v (test context: %v)", werr, ferr, ctx.Err())
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// TestIdleConnectionsOutliveTimeout: a connection left idle for longer than
// the progress timeout is not reused into a failure: requests after a pause
// succeed, and a multi-part upload with the short timeout completes.
func TestIdleConnectionsOutliveTimeout(t *testing.T) {
	cfg := s3test.Bucket(t)
	const timeout = 300 * time.Millisecond
	s, err := s3blob.New(s3blob.Config{
		Endpoint: cfg.Endpoint, Bucket: cfg.Bucket, Region: cfg.Region,
		AccessKey: cfg.AccessKey, SecretKey: cfg.SecretKey, PathStyle: true, PartSize: partSize, Timeout: timeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	data := bytes.Repeat([]byte("comfygate "), 3*partSize/10)
	u, err := s.NewUpload(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	defer u.Abort()
	if _, err := u.ReadFrom(bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := u.Finish(); err != nil {
		t.Fatal(err)
	}
	ref, err := u.Publish(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		time.Sleep(timeout + 100*time.Millisecond) // idle past the timeout
		size, err := s.Stat(ctx, ref)
		if err != nil || size != int64(len(data)) {
			t.Fatalf("Stat after an idle pause %d: %d, %v", i, size, err)
		}
	}
}
