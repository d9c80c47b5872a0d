package assets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/storage/s3test"
)

// lifecycleStores are the real blob stores the lifecycle tests run on, with
// a body size that takes each store's streaming path.
var lifecycleStores = []struct {
	name  string
	large int
	open  func(t *testing.T) blob.Store
}{
	{"file_system", 2 << 20, func(t *testing.T) blob.Store {
		s := blob.NewFileSystem(filepath.Join(t.TempDir(), "blobs"))
		if err := s.Init(); err != nil {
			t.Fatal(err)
		}
		return s
	}},
	{"s3", 5<<20 + 1, func(t *testing.T) blob.Store {
		b := s3test.Bucket(t)
		s, err := s3blob.New(s3blob.Config{Endpoint: b.Endpoint, Bucket: b.Bucket, Region: b.Region,
			AccessKey: b.AccessKey, SecretKey: b.SecretKey, PathStyle: true, PartSize: 5 << 20})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}},
}

// newPostgresService is a Service on a Postgres schema of its own (row
// locks, several connections: what many replicas share) and blobs.
func newPostgresService(t *testing.T, blobs blob.Store) (*Service, *clock) {
	t.Helper()
	st, err := postgres.Open(context.Background(), pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Now().UTC()}
	return &Service{Store: st, Blobs: blobs, MaxUploadBytes: 64 << 20, Now: clk.Now}, clk
}

// TestConcurrentUploadAndDelete races uploads and deletes of the same bytes
// through the service, on Postgres and each real blob store: workers upload,
// read back and delete assets over a few shared contents, so that the last
// reference to a blob goes while another upload of the same bytes is under
// way, over and over (half of the uploads declare expected_hash, so that on
// S3 both upload paths race). Every acknowledged upload must find its bytes whole
// until its own asset is deleted, and once every asset is gone no object
// and no upload leftover may remain.
func TestConcurrentUploadAndDelete(t *testing.T) {
	for _, bs := range lifecycleStores {
		t.Run(bs.name, func(t *testing.T) {
			blobs := bs.open(t)
			s, _ := newPostgresService(t, blobs)
			ctx := context.Background()
			contents := [][]byte{randomData(20<<10, 1), randomData(20<<10, 2), randomData(bs.large, 3)}
			type worker struct {
				content []byte
				rounds  int
			}
			var workers []worker
			for i := 0; i < 6; i++ {
				workers = append(workers, worker{contents[i%2], 12})
			}
			workers = append(workers, worker{contents[2], 3}, worker{contents[2], 3})

			var (
				wg   sync.WaitGroup
				mu   sync.Mutex
				live []Result
			)
			errs := make(chan error, 1000)
			for w, wk := range workers {
				wg.Go(func() {
					for r := range wk.rounds {
						account := fmt.Sprintf("acct-%d", (w+r)%3)
						parts := []part{{"content_type", "image/png"}, {"file_path", fmt.Sprintf("w%d/r%d.png", w, r)}}
						if (w+r)%2 == 1 { // half declare the hash, as the SDKs do
							parts = append(parts, part{"expected_hash", hashOf(wk.content)})
						}
						body, ct := multipartBody(t, wk.content, parts...)
						res, err := s.Upload(ctx, account, body, ct)
						if err != nil {
							errs <- fmt.Errorf("worker %d round %d: Upload: %w", w, r, err)
							continue
						}
						if err := readBack(ctx, s, res, wk.content); err != nil {
							errs <- fmt.Errorf("worker %d round %d: acknowledged upload: %w", w, r, err)
						}
						if r == wk.rounds-1 && w%3 == 0 {
							mu.Lock()
							live = append(live, res)
							mu.Unlock()
							continue
						}
						if err := s.Delete(ctx, account, res.Asset.ID); err != nil {
							errs <- fmt.Errorf("worker %d round %d: Delete: %w", w, r, err)
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, res := range live {
				if err := readBack(ctx, s, res, nil); err != nil {
					t.Errorf("survivor %s: %v", res.Asset.ID, err)
				}
			}
			for _, res := range live {
				if err := s.Delete(ctx, res.Asset.AccountID, res.Asset.ID); err != nil {
					t.Fatalf("Delete survivor: %v", err)
				}
			}
			if objects, err := blobs.List(ctx, blob.Ref{}, 100); err != nil || len(objects) != 0 {
				t.Errorf("objects after every asset was deleted: %v, %v; want none", objects, err)
			}
			if left, err := blobs.Leftovers(ctx); err != nil || len(left) != 0 {
				t.Errorf("Leftovers = %v, %v; want none", left, err)
			}
		})
	}
}

// readBack checks that an asset's bytes are there and whole (want nil: as
// large as the record says).
func readBack(ctx context.Context, s *Service, res Result, want []byte) error {
	a, err := s.Get(ctx, res.Asset.AccountID, res.Asset.ID)
	if err != nil {
		return fmt.Errorf("Get: %w", err)
	}
	f, err := s.OpenContent(ctx, a, 0)
	if err != nil {
		return fmt.Errorf("OpenContent: %w", err)
	}
	defer f.Close()
	got, err := io.ReadAll(f)
	if err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if int64(len(got)) != a.SizeBytes || want != nil && !bytes.Equal(got, want) {
		return fmt.Errorf("read %d bytes, want %d", len(got), a.SizeBytes)
	}
	return nil
}

// TestRetentionRemovesBytes: the retention sweep removes a blob's bytes
// with its last expired asset, on each real blob store, and keeps bytes
// that an unexpired asset still references.
func TestRetentionRemovesBytes(t *testing.T) {
	for _, bs := range lifecycleStores {
		t.Run(bs.name, func(t *testing.T) {
			blobs := bs.open(t)
			s, clk := newPostgresService(t, blobs)
			ctx := context.Background()
			alone, shared := randomData(bs.large, 5), randomData(1000, 6)
			gone := upload(t, s, ctx, "acct", "alone.png", alone, part{"expires_in", "60"}).Asset.Object()
			upload(t, s, ctx, "acct", "s1.png", shared, part{"expires_in", "60"})
			kept := upload(t, s, ctx, "acct", "s2.png", shared, part{"expires_in", "3600"})
			clk.Advance(2 * time.Minute)
			if n, err := s.SweepExpired(ctx, 100); err != nil || n != 2 {
				t.Fatalf("SweepExpired = %d, %v; want 2", n, err)
			}
			if _, err := blobs.Stat(ctx, gone); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("bytes of the expired asset: Stat = %v, want fs.ErrNotExist", err)
			}
			if err := readBack(ctx, s, kept, shared); err != nil {
				t.Errorf("bytes an unexpired asset references: %v", err)
			}
		})
	}
}

func randomData(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed ^ byte(i>>11)
	}
	return b
}
