package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/zeebo/blake3"

	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/s3test"
)

// TestBenchS3UploadPhases: where the time of one 100 MiB upload into S3
// goes when the bytes come from memory rather than a client, in the blob
// store's own phases (issue 12's throughput line): writing the parts (the
// default part size, parts in flight as the gateway sends them), Finish
// (the last part and those still in flight) and Publish (the completion of
// the multipart upload at the expected hash's address, as the SDK path
// does), against one PutObject request of the same bytes to the same
// server (UNSIGNED-PAYLOAD, as the parts are sent).
//
//	eval "$(tests/s3-server)"
//	COMFYGATE_BENCH=1 go test -count=1 -v -run TestBenchS3UploadPhases ./tests/bench/
func TestBenchS3UploadPhases(t *testing.T) {
	requireBench(t)
	rounds := envInt("COMFYGATE_BENCH_ROUNDS", 8)
	bucket := s3test.Bucket(t)
	store, err := s3blob.New(s3blob.Config{Endpoint: bucket.Endpoint, Bucket: bucket.Bucket, Region: bucket.Region,
		AccessKey: bucket.AccessKey, SecretKey: bucket.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	client := bucket.Client(t)
	ctx := context.Background()
	data := make([]byte, envInt("COMFYGATE_BENCH_UPLOAD_MIB", 100)*mib)
	_, _ = rand.Read(data)
	var writes, finish, publish, total, single []time.Duration
	for r := 0; r < rounds; r++ {
		quiet(t)
		data[r%len(data)] ^= 0xff // new bytes, so that nothing is deduplicated
		sum := blake3.Sum256(data)
		start := time.Now()
		up, err := store.NewUpload(ctx, "blake3:"+hex.EncodeToString(sum[:]))
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); off += 32 << 10 { // a multipart reader's pieces
			if _, err := up.Write(data[off:min(off+32<<10, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		wrote := time.Now()
		if _, _, err := up.Finish(); err != nil {
			t.Fatal(err)
		}
		finished := time.Now()
		if _, err := up.Publish(nil); err != nil {
			t.Fatal(err)
		}
		done := time.Now()
		writes, finish, publish, total = append(writes, wrote.Sub(start)), append(finish, finished.Sub(wrote)),
			append(publish, done.Sub(finished)), append(total, done.Sub(start))

		quiet(t)
		start = time.Now()
		if _, err := client.PutObject(ctx, bucket.Bucket, fmt.Sprintf("single/%d", r), bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{DisableMultipart: true, DisableContentSha256: true}); err != nil {
			t.Fatal(err)
		}
		single = append(single, time.Since(start))
		t.Logf("round %d: writes %v, Finish %v, Publish %v, total %v; one PutObject request %v", r+1,
			writes[r].Round(time.Millisecond), finish[r].Round(time.Millisecond), publish[r].Round(time.Millisecond),
			total[r].Round(time.Millisecond), single[r].Round(time.Millisecond))
	}
	t.Logf("\nmedians over %d rounds: writes %v, Finish %v, Publish %v, total %v; one PutObject request %v", rounds,
		Median(writes).Round(time.Millisecond), Median(finish).Round(time.Millisecond), Median(publish).Round(time.Millisecond),
		Median(total).Round(time.Millisecond), Median(single).Round(time.Millisecond))
}
