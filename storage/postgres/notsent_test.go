package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/postgres"
)

// TestWriteThatNeverReachedTheServer: a create that fails because no
// connection could be made is storage.ErrNotSent (the idempotency handler
// then frees the key); the chaos suite's Postgres-down scenario is the
// same case through the gateway.
func TestWriteThatNeverReachedTheServer(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now: connection refused
	st, err := postgres.Open(context.Background(), "postgres://postgres@"+addr+"/test?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = st.CreateJob(ctx, storage.NewJob{ID: uuid.NewString(), AccountID: "acct", Pool: "p",
		Workflow: json.RawMessage(`{"1": {"class_type":"X"}}`), ExpiresAt: time.Now().Add(time.Hour), IdempotencyKey: "k"})
	if !errors.Is(err, storage.ErrNotSent) {
		t.Errorf("CreateJob against a closed port: %v, want ErrNotSent", err)
	}
	_, err = st.CreateAsset(ctx, storage.NewAsset{ID: uuid.NewString(), AccountID: "acct",
		Hash:      "blake3:00000000000000000000000000000000000000000000000000000000000000aa",
		SizeBytes: 1, ContentType: "text/plain", FilePath: "a.txt", IdempotencyKey: "k"}, atAddress("blake3:00000000000000000000000000000000000000000000000000000000000000aa"))
	if !errors.Is(err, storage.ErrNotSent) {
		t.Errorf("CreateAsset against a closed port: %v, want ErrNotSent", err)
	}
}

// atAddress is the publish step of a create whose bytes are at their
// address.
func atAddress(hash string) storage.Publisher {
	return storage.PublishFunc(func(*blob.Ref) (blob.Ref, error) { return blob.Ref{Hash: hash}, nil })
}
