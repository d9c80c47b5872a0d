package chaos

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/minio/minio-go/v7"
)

// SeedPreviousRelease writes what a stack of the release before issue 32
// left in its bucket and database, so that every scenario runs on a bucket
// holding both layouts: n assets of the account the gateways serve, over
// blob rows that name no object key and objects at their content address
// (objects/ab/cd/<hex>), written with that release's statements; and one of
// its temp objects under tmp/ (an upload cut before its copy), which the
// sweeper must remove. The seeds go into h, for the workload to upload
// again and delete, and for the checker to read back.
func SeedPreviousRelease(t *testing.T, s *Stack, h *History, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.DSN)
	if err != nil {
		t.Fatalf("seeding: postgres: %v", err)
	}
	defer conn.Close(context.Background())
	put := func(key string, data []byte) {
		t.Helper()
		if _, err := s.BucketClient.PutObject(ctx, s.Bucket.Bucket, key, bytes.NewReader(data), int64(len(data)),
			minio.PutObjectOptions{}); err != nil {
			t.Fatalf("seeding: %v", err)
		}
	}
	for i := range n {
		data := make([]byte, 2048+i*1000)
		rand.Read(data)
		hash := hashOf(data)
		hx := strings.TrimPrefix(hash, "blake3:")
		id := uuid.NewString()
		// The previous release's create, word for word and in its order:
		// the blob's row is held (upserted in the create's transaction)
		// before the object is published, so that a sweeper listing the
		// object meanwhile waits for the commit and finds the row. Putting
		// the object first would hand the sweeper an orphan to remove.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatalf("seeding: %v", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO blobs (hash, size, refs) VALUES ($1, $2, 1)
			ON CONFLICT (hash) DO UPDATE SET refs = blobs.refs + 1`, hash, len(data)); err != nil {
			t.Fatalf("seeding: %v", err)
		}
		put("objects/"+hx[0:2]+"/"+hx[2:4]+"/"+hx, data)
		if _, err := tx.Exec(ctx, `INSERT INTO assets (id, account_id, hash, size_bytes, content_type, file_path, tags)
			VALUES ($1, 'local', $2, $3, 'application/octet-stream', $4, '{}')`, id, hash, len(data),
			fmt.Sprintf("seed-%d.bin", i)); err != nil {
			t.Fatalf("seeding: %v", err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("seeding: %v", err)
		}
		h.AddSeed(Seed{ID: id, Data: data})
	}
	put("tmp/20250101T000000-"+strings.Repeat("cd", 16), []byte("an upload of the release before, cut before its copy"))
}
