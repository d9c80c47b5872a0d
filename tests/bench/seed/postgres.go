package seed

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres writes p into the migrated comfygate schema on pool's search
// path with one COPY per table (blobs, assets, jobs, job_outputs), then
// VACUUM ANALYZEs them, as autovacuum would have on a store that ran for
// a while (statistics for the planner, a visibility map for index-only
// scans). COPY fires the jobs triggers, so queue_counts matches the queued
// jobs written.
func Postgres(ctx context.Context, pool *pgxpool.Pool, p Plan) (Stats, error) {
	start := time.Now()
	g := newGen(p)
	var st Stats
	// Each pass runs its generator in a goroutine feeding COPY's row
	// source, so rows are made while the previous ones are written.
	copyRows := func(table string, cols []string, fill func(emit func([]any) error) error) (int64, error) {
		rows := make(chan []any, 1024)
		errc := make(chan error, 1)
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go func() {
			defer close(rows)
			errc <- fill(func(r []any) error {
				select {
				case rows <- r:
					return nil
				case <-cctx.Done():
					return cctx.Err()
				}
			})
		}()
		n, err := pool.CopyFrom(ctx, pgx.Identifier{table}, cols, pgx.CopyFromFunc(func() ([]any, error) {
			r, ok := <-rows
			if !ok {
				return nil, nil
			}
			return r, nil
		}))
		cancel()
		if gerr := <-errc; err == nil && gerr != nil && gerr != context.Canceled {
			err = gerr
		}
		if err != nil {
			return n, fmt.Errorf("seed: copy %s: %w", table, err)
		}
		return n, nil
	}
	n, err := copyRows("blobs", []string{"hash", "size", "refs"}, func(emit func([]any) error) error {
		return g.blobs(func(b Blob) error { return emit([]any{b.Hash, b.Size, int32(b.Refs)}) })
	})
	if err != nil {
		return st, err
	}
	st.Blobs = int(n)
	_, err = copyRows("assets", []string{"id", "account_id", "hash", "size_bytes", "content_type", "file_path",
		"job_id", "created_at", "expires_at"}, func(emit func([]any) error) error {
		return g.assets(func(a Asset) error {
			if a.JobID != nil {
				st.Outputs++
			} else {
				st.Uploads++
			}
			return emit([]any{a.ID, a.Account, a.Hash, a.Size, a.ContentType, a.FilePath, a.JobID, a.Created, a.Expires})
		})
	})
	if err != nil {
		return st, err
	}
	_, err = copyRows("jobs", []string{"id", "account_id", "pool", "status", "workflow", "created_at", "started_at",
		"completed_at", "expires_at", "progress", "error", "attempt", "idempotency_key", "turn"},
		func(emit func([]any) error) error {
			for i := range g.p.Jobs {
				j := g.job(i)
				if j.Status == "queued" {
					st.Queued++
				}
				if err := emit([]any{j.ID, j.Account, g.p.Pool, j.Status, Workflow, j.Created, j.Started, j.Completed,
					j.Expires, j.Progress, j.Error, int32(j.Attempt), j.IdempotencyKey, j.Turn}); err != nil {
					return err
				}
				st.Jobs++
			}
			return nil
		})
	if err != nil {
		return st, err
	}
	_, err = copyRows("job_outputs", []string{"job_id", "attempt", "seq", "node_id", "name", "type", "asset_id"},
		func(emit func([]any) error) error {
			for i := range g.p.Jobs {
				if a, ok := g.output(i); ok {
					if err := emit([]any{*a.JobID, int32(1), int32(0), "9", a.FilePath, "output", a.ID}); err != nil {
						return err
					}
				}
			}
			return nil
		})
	if err != nil {
		return st, err
	}
	for _, t := range []string{"blobs", "assets", "jobs", "job_outputs", "queue_counts"} {
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+t); err != nil {
			return st, fmt.Errorf("seed: vacuum %s: %w", t, err)
		}
	}
	st.Took = time.Since(start)
	return st, nil
}
