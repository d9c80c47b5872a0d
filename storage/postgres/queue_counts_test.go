package postgres_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/postgres"
	"github.com/comfygate/comfygate/storage/storetest"
)

// The queue_counts triggers (migration 0004) must keep, for every pool, the
// sum of its shard rows equal to its number of queued jobs, whichever path
// moves a job in or out of 'queued': CreateJob's check relies on it.

var workerLost = json.RawMessage(`{"type":"worker_lost","message":"worker lost"}`)

// queueCountMismatches lists every pool whose queue_counts sum differs from
// its queued jobs, as "pool: sum n, count m".
func queueCountMismatches(t *testing.T, st *postgres.Store) []string {
	t.Helper()
	rows, err := st.Pool().Query(testCtx(t), `SELECT coalesce(c.pool, j.pool), coalesce(c.n, 0), coalesce(j.n, 0)
		FROM (SELECT pool, sum(n) AS n FROM queue_counts GROUP BY pool) c
		FULL JOIN (SELECT pool, count(*) AS n FROM jobs WHERE status = 'queued' GROUP BY pool) j
			ON j.pool = c.pool
		WHERE coalesce(c.n, 0) <> coalesce(j.n, 0)`)
	if err != nil {
		t.Fatalf("compare queue_counts with jobs: %v", err)
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var pool string
		var sum, count int64
		if err := rows.Scan(&pool, &sum, &count); err != nil {
			t.Fatalf("compare queue_counts with jobs: %v", err)
		}
		bad = append(bad, fmt.Sprintf("%s: sum %d, count %d", pool, sum, count))
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("compare queue_counts with jobs: %v", err)
	}
	return bad
}

// queueCount is the pool's queue_counts sum.
func queueCount(t *testing.T, st *postgres.Store, pool string) int64 {
	t.Helper()
	var n int64
	if err := st.Pool().QueryRow(testCtx(t), `SELECT coalesce(sum(n), 0) FROM queue_counts WHERE pool = $1`,
		pool).Scan(&n); err != nil {
		t.Fatalf("sum queue_counts: %v", err)
	}
	return n
}

func queuedJob(account, pool string, maxQueued int, expires time.Time) storage.NewJob {
	return storage.NewJob{ID: uuid.NewString(), AccountID: account, Pool: pool,
		Workflow: json.RawMessage(`{"1":{"class_type":"X","inputs":{}}}`), ExpiresAt: expires, MaxQueued: maxQueued}
}

// TestQueueCountsFollowEveryTransition walks one pool through every path
// that changes a job's status (and the raw SQL ones: delete, change of
// pool, truncate), checking the count after each step.
func TestQueueCountsFollowEveryTransition(t *testing.T) {
	st := freshStore(t)
	fs := newMemFS()
	account, pool, other := uuid.NewString(), "pool-"+uuid.NewString(), "other-"+uuid.NewString()
	later, past := time.Now().Add(time.Hour), time.Now().Add(-time.Hour)
	var jobs []storage.Job // created, oldest first
	var claimed storage.Job
	create := func(maxQueued int, expires time.Time) error {
		j, err := st.CreateJob(testCtx(t), queuedJob(account, pool, maxQueued, expires))
		if err == nil {
			jobs = append(jobs, j)
		}
		return err
	}
	claim := func(lease time.Duration) error {
		var err error
		claimed, err = st.ClaimJob(testCtx(t), pool, "worker", lease, 0, fs.remove)
		return err
	}
	release := func(maxAttempts int) error {
		_, err := st.ReleaseJob(testCtx(t), claimed.ID, claimed.Attempt, maxAttempts, workerLost)
		return err
	}
	reclaim := func(maxAttempts, want int) error {
		got, err := st.ReclaimExpired(testCtx(t), time.Now().Add(time.Minute), maxAttempts, workerLost)
		if err == nil && len(got) != want {
			err = fmt.Errorf("reclaimed %d jobs, want %d", len(got), want)
		}
		return err
	}
	exec := func(sql string, args ...any) error {
		_, err := st.Pool().Exec(testCtx(t), sql, args...)
		return err
	}
	last := func() string { return jobs[len(jobs)-1].ID }
	steps := []struct {
		name    string
		run     func() error
		wantErr error
		want    int64 // pool's count after the step
	}{
		{"create", func() error { return create(0, later) }, nil, 1},
		{"create bounded", func() error { return create(2, later) }, nil, 2},
		{"create over the bound is rolled back", func() error { return create(2, later) }, storage.ErrQueueFull, 2},
		{"claim", func() error { return claim(time.Hour) }, nil, 1},
		{"renew lease and set progress (no status change)", func() error {
			if _, err := st.RenewLease(testCtx(t), claimed.ID, claimed.Attempt, time.Hour); err != nil {
				return err
			}
			return st.SetProgress(testCtx(t), claimed.ID, claimed.Attempt, json.RawMessage(`{"value":1}`))
		}, nil, 1},
		{"release back to the queue", func() error { return release(5) }, nil, 2},
		{"claim again", func() error { return claim(time.Hour) }, nil, 1},
		{"finish", func() error {
			_, err := st.FinishJob(testCtx(t), claimed.ID, claimed.Attempt, storage.JobSucceeded, nil)
			return err
		}, nil, 1},
		{"cancel a queued job", func() error { _, err := st.CancelJob(testCtx(t), account, jobs[1].ID); return err }, nil, 0},
		{"cancel a canceled job", func() error { _, err := st.CancelJob(testCtx(t), account, jobs[1].ID); return err }, nil, 0},
		{"create after cancel", func() error { return create(0, later) }, nil, 1},
		{"claim with a lease that runs out", func() error { return claim(time.Microsecond) }, nil, 0},
		{"reclaim to the queue", func() error { return reclaim(5, 1) }, nil, 1},
		{"claim with a lease that runs out again", func() error { return claim(time.Microsecond) }, nil, 0},
		{"reclaim to failed", func() error { return reclaim(2, 1) }, nil, 0},
		{"create already past its expiry", func() error { return create(0, past) }, nil, 1},
		{"expire", func() error { _, err := st.ExpireJobs(testCtx(t), time.Now(), past, 10); return err }, nil, 0},
		{"create to cancel while running", func() error { return create(0, later) }, nil, 1},
		{"claim it", func() error { return claim(time.Hour) }, nil, 0},
		{"cancel running", func() error { _, err := st.CancelJob(testCtx(t), account, claimed.ID); return err }, nil, 0},
		{"release canceling", func() error { return release(5) }, nil, 0},
		{"create to delete", func() error { return create(0, later) }, nil, 1},
		{"delete a queued job", func() error { return exec(`DELETE FROM jobs WHERE id = $1`, last()) }, nil, 0},
		{"create to move", func() error { return create(0, later) }, nil, 1},
		{"move a queued job to another pool", func() error {
			return exec(`UPDATE jobs SET pool = $2 WHERE id = $1`, last(), other)
		}, nil, 0},
		{"create two to truncate", func() error {
			if err := create(0, later); err != nil {
				return err
			}
			return create(0, later)
		}, nil, 2},
		{"truncate", func() error { return exec(`TRUNCATE jobs CASCADE`) }, nil, 0},
		{"create after truncate", func() error { return create(1, later) }, nil, 1},
	}
	for _, s := range steps {
		if err := s.run(); !errors.Is(err, s.wantErr) {
			t.Fatalf("%s: err = %v, want %v", s.name, err, s.wantErr)
		}
		if got := queueCount(t, st, pool); got != s.want {
			t.Errorf("%s: queue count %d, want %d", s.name, got, s.want)
		}
		for _, m := range queueCountMismatches(t, st) {
			t.Errorf("%s: queue_counts disagrees with jobs: %s", s.name, m)
		}
	}
}

// TestQueueCountsUnderConcurrentTransitions runs every status-changing path
// at once from many goroutines over a few pools (so shards are shared and
// reapers move jobs of several pools in one statement), then checks that
// each pool's sum equals its queued jobs. A deadlock between reapers would
// surface as an error.
func TestQueueCountsUnderConcurrentTransitions(t *testing.T) {
	st := freshStore(t)
	fs := newMemFS()
	const workers, opsEach, bound = 8, 60, 12
	account := uuid.NewString()
	pools := []string{"p0-" + uuid.NewString(), "p1-" + uuid.NewString(), "p2-" + uuid.NewString()}
	var (
		mu      sync.Mutex
		created []string
		leases  []storage.Job // claimed attempts not yet ended by their claimer
		tally   = map[string]int{}
	)
	pick := func(xs *[]string) (string, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(*xs) == 0 {
			return "", false
		}
		return (*xs)[rand.IntN(len(*xs))], true
	}
	takeLease := func() (storage.Job, bool) {
		mu.Lock()
		defer mu.Unlock()
		if len(leases) == 0 {
			return storage.Job{}, false
		}
		i := rand.IntN(len(leases))
		j := leases[i]
		leases = append(leases[:i], leases[i+1:]...)
		return j, true
	}
	// ok reports whether err is an outcome the operation may have under
	// races (the job moved on, the queue was full or empty).
	ok := func(err error) bool {
		return err == nil || errors.Is(err, storage.ErrQueueFull) || errors.Is(err, storage.ErrNotFound) ||
			errors.Is(err, storage.ErrLeaseLost)
	}
	ops := []struct {
		name   string
		weight int
		run    func(pool string) error
	}{
		{"create", 8, func(pool string) error {
			expires := time.Now().Add(time.Hour)
			if rand.IntN(5) == 0 {
				expires = time.Now().Add(-time.Hour)
			}
			j, err := st.CreateJob(testCtx(t), queuedJob(account, pool, rand.IntN(2)*bound, expires))
			if err == nil {
				mu.Lock()
				created = append(created, j.ID)
				mu.Unlock()
			}
			return err
		}},
		{"claim", 5, func(pool string) error {
			lease := time.Hour
			if rand.IntN(2) == 0 {
				lease = time.Microsecond
			}
			j, err := st.ClaimJob(testCtx(t), pool, "w", lease, 0, fs.remove)
			if err == nil {
				mu.Lock()
				leases = append(leases, j)
				mu.Unlock()
			}
			return err
		}},
		{"finish", 2, func(string) error {
			if j, ok := takeLease(); ok {
				_, err := st.FinishJob(testCtx(t), j.ID, j.Attempt, storage.JobFailed, workerLost)
				return err
			}
			return nil
		}},
		{"release", 2, func(string) error {
			if j, ok := takeLease(); ok {
				_, err := st.ReleaseJob(testCtx(t), j.ID, j.Attempt, 3, workerLost)
				return err
			}
			return nil
		}},
		{"cancel", 2, func(string) error {
			if id, ok := pick(&created); ok {
				_, err := st.CancelJob(testCtx(t), account, id)
				return err
			}
			return nil
		}},
		{"reclaim", 2, func(string) error {
			_, err := st.ReclaimExpired(testCtx(t), time.Now().Add(time.Minute), 3, workerLost)
			return err
		}},
		{"expire", 2, func(string) error {
			_, err := st.ExpireJobs(testCtx(t), time.Now(), time.Now().Add(-time.Hour), 20)
			return err
		}},
		{"delete", 1, func(string) error {
			if id, ok := pick(&created); ok {
				_, err := st.Pool().Exec(testCtx(t), `DELETE FROM jobs WHERE id = $1`, id)
				return err
			}
			return nil
		}},
		{"move", 1, func(pool string) error {
			_, err := st.Pool().Exec(testCtx(t), `UPDATE jobs SET pool = $1
				WHERE id IN (SELECT id FROM jobs WHERE status = 'queued' AND pool <> $1
					ORDER BY id LIMIT 3 FOR UPDATE SKIP LOCKED)`, pool)
			return err
		}},
	}
	var weighted []int
	for i, op := range ops {
		for range op.weight {
			weighted = append(weighted, i)
		}
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range opsEach {
				op := ops[weighted[rand.IntN(len(weighted))]]
				if err := op.run(pools[rand.IntN(len(pools))]); !ok(err) {
					t.Errorf("%s: %v", op.name, err)
					return
				}
				mu.Lock()
				tally[op.name]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	t.Logf("operations: %v", tally)
	for _, m := range queueCountMismatches(t, st) {
		t.Errorf("queue_counts disagrees with jobs: %s", m)
	}
	var queued, shards int
	if err := st.Pool().QueryRow(testCtx(t), `SELECT (SELECT count(*) FROM jobs WHERE status = 'queued'),
		(SELECT count(DISTINCT shard) FROM queue_counts)`).Scan(&queued, &shards); err != nil {
		t.Fatalf("read totals: %v", err)
	}
	// The comparison above means little if nothing stayed queued or every
	// delta landed in one shard.
	if queued == 0 || shards < 2 {
		t.Errorf("%d jobs queued over %d distinct shards at the end; the run did not exercise the counts", queued, shards)
	}
}

// TestQueueCountsBackfill: migration 0004 counts the jobs already queued
// when it runs. The test removes what 0004 made, writes jobs without the
// triggers, and migrates again.
func TestQueueCountsBackfill(t *testing.T) {
	st := freshStore(t)
	if _, err := st.Pool().Exec(testCtx(t), `DROP TABLE queue_counts;
		DROP FUNCTION queue_counts_apply() CASCADE;
		DELETE FROM schema_migrations WHERE version = 4`); err != nil {
		t.Fatalf("undo migration 0004: %v", err)
	}
	account := uuid.NewString()
	pools := []struct {
		name     string
		statuses []string
		want     int64
	}{
		{"only-queued", []string{"queued", "queued", "queued"}, 3},
		{"mixed", []string{"queued", "running", "canceled", "queued", "expired"}, 2},
		{"none-queued", []string{"running", "succeeded"}, 0},
	}
	for _, p := range pools {
		for _, status := range p.statuses {
			if _, err := st.Pool().Exec(testCtx(t), `INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at)
				VALUES ($1, $2, $3, $4, '{}', now() + interval '1 hour')`, uuid.NewString(), account, p.name, status); err != nil {
				t.Fatalf("insert %s job: %v", status, err)
			}
		}
	}
	if err := st.Migrate(testCtx(t)); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	for _, p := range pools {
		if got := queueCount(t, st, p.name); got != p.want {
			t.Errorf("pool %s: queue count %d after backfill, want %d", p.name, got, p.want)
		}
	}
	// The triggers are back: a bounded create sees the backfilled count.
	_, err := st.CreateJob(testCtx(t), queuedJob(account, "only-queued", 3, time.Now().Add(time.Hour)))
	if !errors.Is(err, storage.ErrQueueFull) {
		t.Errorf("CreateJob over a backfilled full queue: err = %v, want ErrQueueFull", err)
	}
	if _, err := st.CreateJob(testCtx(t), queuedJob(account, "mixed", 3, time.Now().Add(time.Hour))); err != nil {
		t.Errorf("CreateJob with room after backfill: %v", err)
	}
	for _, m := range queueCountMismatches(t, st) {
		t.Errorf("queue_counts disagrees with jobs: %s", m)
	}
}

// TestQueueCountsConcurrentReapers races reapers whose statements each move
// dozens of jobs of several pools: the triggers must not deadlock them
// (counts written per row, in row order, to random shards would), and the
// counts must end at zero.
func TestQueueCountsConcurrentReapers(t *testing.T) {
	st := freshStore(t)
	const jobsPerPool, expirers, reclaimers, batch = 150, 4, 2, 30
	pools := []string{"r0-" + uuid.NewString(), "r1-" + uuid.NewString(), "r2-" + uuid.NewString()}
	// Every job is past its expiry; a third run with a lease already out,
	// so ReclaimExpired queues them again while ExpireJobs takes the rest.
	if _, err := st.Pool().Exec(testCtx(t), `INSERT INTO jobs (id, account_id, pool, status, workflow, expires_at,
			attempt, started_at, lease_owner, lease_expires_at)
		SELECT gen_random_uuid(), 'acct', p, CASE WHEN i % 3 = 0 THEN 'running' ELSE 'queued' END, '{}',
			now() - interval '1 minute', CASE WHEN i % 3 = 0 THEN 1 ELSE 0 END,
			CASE WHEN i % 3 = 0 THEN now() END, CASE WHEN i % 3 = 0 THEN 'w' END,
			CASE WHEN i % 3 = 0 THEN now() - interval '1 minute' END
		FROM unnest($1::text[]) AS p, generate_series(1, $2::int) AS i`, pools, jobsPerPool); err != nil {
		t.Fatalf("insert jobs: %v", err)
	}
	var wg sync.WaitGroup
	// run starts n goroutines that repeat pass until it moves nothing.
	run := func(name string, n int, pass func() (int, error)) {
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					moved, err := pass()
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					if moved == 0 {
						return
					}
				}
			}()
		}
	}
	expire := func() (int, error) {
		jobs, err := st.ExpireJobs(testCtx(t), time.Now(), time.Now().Add(-time.Hour), batch)
		return len(jobs), err
	}
	run("expire", expirers, expire)
	run("reclaim", reclaimers, func() (int, error) {
		jobs, err := st.ReclaimExpired(testCtx(t), time.Now(), 3, workerLost)
		return len(jobs), err
	})
	wg.Wait()
	// An expirer may stop while rows it skipped were still held by others.
	run("expire what is left", 1, expire)
	wg.Wait()
	var left int
	if err := st.Pool().QueryRow(testCtx(t), `SELECT count(*) FROM jobs WHERE status <> 'expired'`).Scan(&left); err != nil {
		t.Fatalf("count jobs left: %v", err)
	}
	if left != 0 {
		t.Errorf("%d jobs not expired after the reapers", left)
	}
	for _, m := range queueCountMismatches(t, st) {
		t.Errorf("queue_counts disagrees with jobs: %s", m)
	}
	for _, p := range pools {
		if got := queueCount(t, st, p); got != 0 {
			t.Errorf("pool %s: queue count %d after the reapers, want 0", p, got)
		}
	}
}

// TestFairAdmissionAcrossStores runs the fair-admission walk with its
// concurrent creates spread over two Stores on one schema (two gateways):
// the admission lock, not one process's create combiner, keeps the
// bounds exact.
func TestFairAdmissionAcrossStores(t *testing.T) {
	dsn := pgtest.DSN(t)
	first := openStore(t, dsn)
	if err := first.Migrate(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	second := openStore(t, dsn)
	storetest.FairAdmission(t, first, second)
}
