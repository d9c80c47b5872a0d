package chaos

import (
	"context"
	"fmt"

	"github.com/comfygate/comfygate/internal/assets"
	"github.com/comfygate/comfygate/storage/blob"
	"github.com/comfygate/comfygate/storage/blob/s3blob"
	"github.com/comfygate/comfygate/storage/postgres"
)

// runSweepers runs the gateway's own blob sweepers once, as its
// maintenance would given time (it sweeps upload leftovers idle for an
// hour, removes the bytes of unreferenced blobs and walks the store for
// orphans a page a minute): the product's
// code on the stack's bucket and database, straight, not through the fault
// proxies. What the checker then finds in the bucket is what the sweepers
// could not remove.
func runSweepers(ctx context.Context, s *Stack) error {
	store, err := s3blob.New(s3blob.Config{Endpoint: s.Bucket.Endpoint, Bucket: s.Bucket.Bucket, Region: s.Bucket.Region,
		AccessKey: s.Bucket.AccessKey, SecretKey: s.Bucket.SecretKey, PathStyle: true})
	if err != nil {
		return fmt.Errorf("checker: blob store: %w", err)
	}
	// Every upload has ended by now: any leftover is one.
	if _, err := store.Sweep(ctx, 0); err != nil {
		return fmt.Errorf("checker: sweeping upload leftovers: %w", err)
	}
	db, err := postgres.Open(ctx, s.DSN)
	if err != nil {
		return fmt.Errorf("checker: postgres store: %w", err)
	}
	defer db.Close()
	svc := &assets.Service{Store: db, Blobs: store}
	// The bytes of blobs whose last reference went without their removal
	// following (a gateway killed between the two, or a commit whose
	// answer was lost).
	for {
		n, err := svc.SweepUnreferenced(ctx, 1000)
		if err != nil {
			return fmt.Errorf("checker: removing unreferenced blobs: %w", err)
		}
		if n < 1000 {
			break
		}
	}
	for after := (blob.Ref{}); ; {
		next, _, err := svc.SweepOrphans(ctx, after, 1000)
		if err != nil {
			return fmt.Errorf("checker: removing orphan blobs: %w", err)
		}
		if next == (blob.Ref{}) {
			return nil
		}
		after = next
	}
}
