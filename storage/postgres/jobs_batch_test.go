package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/pgtest"
)

// The batch path of CreateJob (jobs_batch.go), driven directly: the
// conformance suite creates jobs one at a time, which never batches.

func batchStore(t *testing.T) *Store {
	t.Helper()
	ctx := context.Background()
	st, err := Open(ctx, pgtest.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return st
}

func batchJob(account, pool, key string) storage.NewJob {
	return storage.NewJob{ID: uuid.NewString(), AccountID: account, Pool: pool,
		Workflow:  json.RawMessage(`{"1": {"class_type":"X"}}`),
		ExpiresAt: time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond), IdempotencyKey: key}
}

func mustCreate(t *testing.T, st *Store, j storage.NewJob) storage.Job {
	t.Helper()
	job, err := st.CreateJob(context.Background(), j)
	if err != nil {
		t.Fatal(err)
	}
	return job
}

// runBatch writes reqs as one batch and returns which were inserted.
func runBatch(st *Store, jobs ...storage.NewJob) []*createReq {
	reqs := make([]*createReq, len(jobs))
	for i, j := range jobs {
		reqs[i] = &createReq{j: j}
	}
	st.writeBatch(context.Background(), reqs)
	return reqs
}

func TestWriteBatchSkipsConflictsAndKeepsPositions(t *testing.T) {
	st := batchStore(t)
	pool := uuid.NewString()
	existing := mustCreate(t, st, batchJob("a", pool, "k-existing"))

	upper := batchJob("a", pool, "k1")
	upper.ID = strings.ToUpper(upper.ID)
	sameKey := batchJob("a", pool, "k1")
	takenKey := batchJob("a", pool, "k-existing")
	takenID := batchJob("b", pool, "")
	takenID.ID = existing.ID
	plain := batchJob("b", pool, "")
	reqs := runBatch(st, upper, takenKey, sameKey, takenID, plain)

	if reqs[1].inserted || reqs[3].inserted {
		t.Errorf("a job with a taken key (%v) or ID (%v) was inserted", reqs[1].inserted, reqs[3].inserted)
	}
	if reqs[0].inserted == reqs[2].inserted {
		t.Errorf("two jobs with one key in a batch: inserted %v and %v, want exactly one", reqs[0].inserted, reqs[2].inserted)
	}
	if !reqs[4].inserted {
		t.Fatal("a job without conflicts was not inserted")
	}
	if got, want := reqs[0].job.ID, strings.ToLower(upper.ID); reqs[0].inserted && got != want {
		t.Errorf("ID = %q, want the canonical %q", got, want)
	}
	// Serially, the batch's positions are exact: those GetJob reads.
	positions := map[int]bool{}
	for _, r := range reqs {
		if !r.inserted {
			continue
		}
		got, err := st.GetJob(context.Background(), r.j.AccountID, r.job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.job.QueuePosition != got.QueuePosition || positions[got.QueuePosition] {
			t.Errorf("batch position %d, GetJob %d (seen before: %v)", r.job.QueuePosition, got.QueuePosition, positions[got.QueuePosition])
		}
		positions[got.QueuePosition] = true
		if !got.CreatedAt.Equal(r.job.CreatedAt) || !got.ExpiresAt.Equal(r.job.ExpiresAt) || !got.ExpiresAt.Equal(r.j.ExpiresAt) ||
			string(got.Workflow) != string(r.j.Workflow) || got.Status != storage.JobQueued || got.Pool != pool ||
			got.AccountID != r.j.AccountID || r.job.Outputs == nil {
			t.Errorf("batch returned %+v, GetJob reads %+v", r.job, got)
		}
	}
	if !positions[2] || !positions[3] {
		t.Errorf("positions %v, want 2 and 3 after the one queued job", positions)
	}
}

func TestWriteBatchBound(t *testing.T) {
	st := batchStore(t)
	pool := uuid.NewString()
	for range 2 {
		mustCreate(t, st, batchJob("a", pool, ""))
	}
	var jobs []storage.NewJob
	for range 5 {
		j := batchJob("a", pool, "")
		j.MaxQueued = 4
		jobs = append(jobs, j)
	}
	reqs := runBatch(st, jobs...)
	for i, r := range reqs {
		if want := i < 2; r.inserted != want {
			t.Errorf("row %d: inserted %v, want %v (bound 4 with 2 queued)", i, r.inserted, want)
		}
	}
	if p0, p1 := reqs[0].job.QueuePosition, reqs[1].job.QueuePosition; p0+p1 != 7 || p0 < 3 || p1 < 3 {
		t.Errorf("positions %d, %d; want 3 and 4", p0, p1)
	}
	// The rows the bound held back, retried alone, are refused as full.
	for _, r := range reqs[2:] {
		if _, err := st.CreateJob(context.Background(), r.j); !errors.Is(err, storage.ErrQueueFull) {
			t.Errorf("retry of a held-back row: %v, want ErrQueueFull", err)
		}
	}
}

// createBatched runs n concurrent CreateJobs that all go through batches
// (a pretended lone create holds the batcher busy) and returns their
// results and how many rows the batches carried.
func createBatched(t *testing.T, st *Store, jobs []storage.NewJob) ([]storage.Job, []error, int) {
	t.Helper()
	var mu sync.Mutex
	rows := 0
	run := st.creates.Run
	st.creates.Run = func(ctx context.Context, reqs []*createReq) {
		mu.Lock()
		rows += len(reqs)
		mu.Unlock()
		run(ctx, reqs)
	}
	if alone, _ := st.creates.Do(context.Background(), &createReq{}); !alone { // the pretended lone create
		t.Fatal("the batcher was not idle")
	}
	out, errs := make([]storage.Job, len(jobs)), make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = st.CreateJob(context.Background(), j)
		}()
	}
	// Hold the slot until every create waits for a batch, so none goes
	// out alone, whatever createInflight is.
	for deadline := time.Now().Add(30 * time.Second); st.creates.Pending() < len(jobs); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d creates waiting for a batch", st.creates.Pending(), len(jobs))
		}
	}
	st.creates.Leave()
	wg.Wait()
	return out, errs, rows
}

func TestCreateJobBatchedConcurrently(t *testing.T) {
	st := batchStore(t)
	pool := uuid.NewString()
	var jobs []storage.NewJob
	for range 30 {
		jobs = append(jobs, batchJob("a", pool, "k-"+uuid.NewString()))
	}
	got, errs, rows := createBatched(t, st, jobs)
	if rows != len(jobs) {
		t.Errorf("batches carried %d rows, want all %d", rows, len(jobs))
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		if got[i].QueuePosition < 1 || got[i].QueuePosition > len(jobs) || got[i].ID != jobs[i].ID {
			t.Errorf("create %d: job %s at position %d", i, got[i].ID, got[i].QueuePosition)
		}
	}
	var queued int
	if err := st.pool.QueryRow(context.Background(), `SELECT count(*) FROM jobs WHERE pool = $1 AND status = 'queued'`,
		pool).Scan(&queued); err != nil || queued != len(jobs) {
		t.Errorf("%d jobs queued (%v), want %d", queued, err, len(jobs))
	}
}

// Concurrent creates with one idempotency key: one wins, every other gets
// ErrDuplicate, as when they are written one by one.
func TestCreateJobBatchedDuplicates(t *testing.T) {
	st := batchStore(t)
	pool := uuid.NewString()
	var jobs []storage.NewJob
	for range 12 {
		jobs = append(jobs, batchJob("a", pool, "same-key"))
	}
	full := batchJob("a", pool, "same-key")
	full.MaxQueued = 1 // the duplicate still wins over a full queue
	jobs = append(jobs, full)
	_, errs, _ := createBatched(t, st, jobs)
	won := 0
	for i, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, storage.ErrDuplicate):
			t.Errorf("create %d: %v, want nil or ErrDuplicate", i, err)
		}
	}
	if won != 1 {
		t.Errorf("%d creates with one key succeeded, want 1", won)
	}
}

// A create still waiting for a batch when its context ends is never written.
func TestCreateJobWaitingCanceled(t *testing.T) {
	st := batchStore(t)
	gate, started := make(chan struct{}), make(chan struct{}, 1)
	run := st.creates.Run
	st.creates.Run = func(ctx context.Context, reqs []*createReq) {
		started <- struct{}{}
		<-gate
		run(ctx, reqs)
	}
	if alone, _ := st.creates.Do(context.Background(), &createReq{}); !alone { // hold one slot
		t.Fatal("the batcher was not idle")
	}
	pool := uuid.NewString()
	held, waiting := batchJob("a", pool, ""), batchJob("a", pool, "")
	heldDone := make(chan error)
	go func() {
		_, err := st.CreateJob(context.Background(), held)
		heldDone <- err
	}()
	// held's batch starts in a free slot: at once when there is a second
	// one, else when the pretended create leaves.
	if createInflight == 1 {
		for st.creates.Pending() == 0 {
			runtime.Gosched()
		}
		st.creates.Leave()
	}
	<-started // held's batch is running, held at the gate, and no slot is free
	ctx, cancel := context.WithCancel(context.Background())
	waitingDone := make(chan error)
	go func() {
		_, err := st.CreateJob(ctx, waiting)
		waitingDone <- err
	}()
	for st.creates.Pending() == 0 {
		runtime.Gosched()
	}
	cancel()
	if err := <-waitingDone; !errors.Is(err, context.Canceled) {
		t.Fatalf("CreateJob = %v, want context.Canceled", err)
	}
	close(gate)
	if err := <-heldDone; err != nil {
		t.Fatal(err)
	}
	if createInflight > 1 {
		st.creates.Leave()
	}
	if _, err := st.GetJob(context.Background(), "a", waiting.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetJob of the canceled create: %v, want ErrNotFound", err)
	}
	if _, err := st.GetJob(context.Background(), "a", held.ID); err != nil {
		t.Errorf("GetJob of the batched create: %v", err)
	}
}

// canonicalUUID gives the form Postgres's id::text returns, for every
// spelling uuid.Parse accepts.
func TestCanonicalUUID(t *testing.T) {
	for _, id := range []string{"0b3e6a0e-6f4f-4a4e-9d7e-2c1f1c0e9a11", "0B3E6A0E-6F4F-4A4E-9D7E-2C1F1C0E9A11",
		"{0b3e6a0e-6f4f-4a4e-9d7e-2c1f1c0e9a11}", "urn:uuid:0b3e6a0e-6f4f-4a4e-9d7e-2c1f1c0e9a11",
		"0b3e6a0e6f4f4a4e9d7e2c1f1c0e9a11"} {
		if got := canonicalUUID(id); got != "0b3e6a0e-6f4f-4a4e-9d7e-2c1f1c0e9a11" {
			t.Errorf("canonicalUUID(%q) = %q", id, got)
		}
	}
}

// Priced creates of two accounts in batches: each account's balance
// covers what it covers and no more, a refused row gets its own exact
// error, and every inserted row is paid for exactly once.
func TestCreateJobBatchedPriced(t *testing.T) {
	st := batchStore(t)
	ctx := context.Background()
	pool := uuid.NewString()
	price := &storage.JobPrice{PerJob: 3, Reserve: 10}
	for account, amount := range map[string]int64{"a": 7 * 10, "b": 1000} {
		if _, err := st.GrantCredits(ctx, account, amount, ""); err != nil {
			t.Fatal(err)
		}
	}
	var jobs []storage.NewJob
	for i := range 40 {
		j := batchJob([]string{"a", "b"}[i%2], pool, "k-"+uuid.NewString())
		j.Price = price
		jobs = append(jobs, j)
	}
	got, errs, rows := createBatched(t, st, jobs)
	if rows != len(jobs) {
		t.Errorf("batches carried %d rows, want all %d", rows, len(jobs))
	}
	created := map[string]int{}
	for i, err := range errs {
		switch {
		case err == nil:
			created[jobs[i].AccountID]++
			if got[i].Credits == nil || got[i].Credits.Reserved != 10 {
				t.Errorf("create %d: credits %+v", i, got[i].Credits)
			}
		case jobs[i].AccountID == "a" && errors.Is(err, storage.ErrInsufficientCredits):
		default:
			t.Errorf("create %d (%s): %v", i, jobs[i].AccountID, err)
		}
	}
	if created["a"] != 7 || created["b"] != 20 {
		t.Fatalf("created %v, want a 7 and b 20", created)
	}
	for account, want := range map[string]int64{"a": 0, "b": 1000 - 20*10} {
		var bal, sum, reservations int64
		if err := st.pool.QueryRow(ctx, `SELECT (SELECT balance FROM credit_accounts WHERE account_id = $1),
			(SELECT sum(amount) FROM credit_entries WHERE account_id = $1),
			(SELECT count(*) FROM credit_entries WHERE account_id = $1 AND kind = 'reservation')`,
			account).Scan(&bal, &sum, &reservations); err != nil {
			t.Fatal(err)
		}
		if bal != want || sum != want || reservations != int64(created[account]) {
			t.Errorf("%s: balance %d, entries sum %d, %d reservations; want %d, %d, %d",
				account, bal, sum, reservations, want, want, created[account])
		}
	}
}

// One batch of two accounts' jobs behind a queue of a third: each account's
// rows take consecutive turns from the queue's front, so the claim order
// goes round-robin.
func TestWriteBatchTurns(t *testing.T) {
	st := batchStore(t)
	pool := uuid.NewString()
	for range 3 {
		mustCreate(t, st, batchJob("c", pool, ""))
	}
	reqs := runBatch(st, batchJob("a", pool, ""), batchJob("a", pool, ""), batchJob("b", pool, ""))
	for i, r := range reqs {
		if !r.inserted {
			t.Fatalf("row %d not inserted", i)
		}
	}
	rows, err := st.pool.Query(context.Background(), `SELECT account_id, turn FROM jobs WHERE pool = $1
		ORDER BY turn, created_at, id`, pool)
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for rows.Next() {
		var account string
		var turn int64
		if err := rows.Scan(&account, &turn); err != nil {
			t.Fatal(err)
		}
		order = append(order, account+":"+string(rune('0'+turn)))
	}
	rows.Close()
	// c's turns 0,1,2; a and b join at the front turn 0; a's second at 1.
	if got := strings.Join(order, " "); got != "c:0 a:0 b:0 c:1 a:1 c:2" && got != "c:0 b:0 a:0 c:1 a:1 c:2" {
		t.Fatalf("queue order %s", got)
	}
}
