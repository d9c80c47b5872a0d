package s3blob_test

import (
	"bytes"
	"errors"
	"io/fs"
	"testing"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// TestRetract: an upload that completed its object at its own key removes
// it when retracted (a create that did not commit); one whose bytes went to
// a declared hash's address, or that kept the blob's recorded object, does
// not touch them.
func TestRetract(t *testing.T) {
	s := newStore(t, s3test.Bucket(t), "")
	for _, size := range []int{1000, partSize + 17} {
		data := bytes.Repeat([]byte{7}, size)

		u, err := s.NewUpload(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		u.Write(data)
		hash, _, err := u.Finish()
		if err != nil {
			t.Fatal(err)
		}
		own, err := u.Publish(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.(storage.Retracter).Retract(); err != nil {
			t.Fatalf("Retract: %v", err)
		}
		if _, err := s.Stat(t.Context(), own); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%d bytes: the retracted object: Stat = %v, want not found", size, err)
		}
		_ = u.Abort()

		kept := putBytes(t, s, data)
		u2, err := s.NewUpload(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		u2.Write(data)
		u2.Finish()
		if got, err := u2.Publish(&kept); err != nil || got != kept {
			t.Fatalf("Publish over the recorded object = %v, %v; want it kept", got, err)
		}
		if err := u2.(storage.Retracter).Retract(); err != nil {
			t.Fatalf("Retract: %v", err)
		}
		_ = u2.Abort()
		if _, err := s.Stat(t.Context(), kept); err != nil {
			t.Errorf("%d bytes: the recorded object after a retract that kept it: %v", size, err)
		}

		addr := blob.Ref{Hash: hash}
		u3, err := s.NewUpload(t.Context(), hash)
		if err != nil {
			t.Fatal(err)
		}
		u3.Write(data)
		u3.Finish()
		if _, err := u3.Publish(nil); err != nil {
			t.Fatal(err)
		}
		if err := u3.(storage.Retracter).Retract(); err != nil {
			t.Fatalf("Retract: %v", err)
		}
		_ = u3.Abort()
		if _, err := s.Stat(t.Context(), addr); err != nil {
			t.Errorf("%d bytes: the object at the declared address after Retract: %v", size, err)
		}
	}
}
