package storetest

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// creditJobCases cover priced jobs: the reservation taken with the job and
// the settlement written with its terminal state, on every path that ends
// a job.
var creditJobCases = []storeCase{
	{"ConcurrentReservationsNeverOverdraw", testConcurrentReservations},
	{"RefusedForCreditsWritesNothing", testRefusedForCredits},
	{"SettlementPerOutcome", testSettlementPerOutcome},
	{"ChargeCountsTheLastAttempt", testChargeLastAttempt},
	{"UnpricedJobsTouchNoLedger", testUnpricedJobs},
}

// pricedJob is a NewJob with price p.
func pricedJob(account, pool string, p storage.JobPrice) storage.NewJob {
	j := newJob(account, pool)
	j.Price = &p
	return j
}

// testConcurrentReservations: 200 concurrent priced creates against a
// balance that covers exactly 17 create exactly 17 jobs; the rest are
// refused with ErrInsufficientCredits, and the balance is never negative
// and always the sum of the ledger (acceptance 1 of issue 14). Unpriced
// jobs of the same account and priced jobs of another account go in at the
// same time and are unaffected.
func testConcurrentReservations(t *testing.T, st storage.Store) {
	account, rich, pool := newID(), newID(), newID()
	price := storage.JobPrice{PerJob: 2, PerSecond: 1, Reserve: 9}
	mustGrant(t, st, account, 17*9)
	mustGrant(t, st, rich, 1000)
	var (
		wg                          sync.WaitGroup
		mu                          sync.Mutex
		created, refused, free, bad int
		richCreated                 int
	)
	stop := make(chan struct{})
	var watchErr error
	var watched sync.WaitGroup
	watched.Add(1)
	go func() { // the balance is never seen negative
		defer watched.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if bal, err := st.CreditBalance(ctx(t), account); err != nil || bal < 0 {
				watchErr = errors.Join(err, errors.New("negative balance seen"))
				return
			}
		}
	}()
	for i := range 240 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case i%12 == 5: // 20 unpriced jobs of the same account
				_, err := st.CreateJob(ctx(t), newJob(account, pool))
				mu.Lock()
				if err == nil {
					free++
				} else {
					bad++
				}
				mu.Unlock()
			case i%12 == 7: // 20 priced jobs of another account
				_, err := st.CreateJob(ctx(t), pricedJob(rich, pool, price))
				mu.Lock()
				if err == nil {
					richCreated++
				} else {
					bad++
				}
				mu.Unlock()
			default: // 200 priced jobs against 17 jobs' worth
				j := pricedJob(account, pool, price)
				j.IdempotencyKey = newID()
				job, err := st.CreateJob(ctx(t), j)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					created++
					if job.Credits == nil || job.Credits.Reserved != 9 || job.Credits.Charged != nil {
						t.Errorf("created job's credits = %+v", job.Credits)
					}
				case errors.Is(err, storage.ErrInsufficientCredits):
					refused++
				default:
					t.Errorf("CreateJob: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	close(stop)
	watched.Wait()
	if watchErr != nil {
		t.Fatal(watchErr)
	}
	if created != 17 || refused != 183 || free != 20 || richCreated != 20 || bad != 0 {
		t.Fatalf("created %d, refused %d, unpriced %d, other account %d, failed %d; want 17, 183, 20, 20, 0",
			created, refused, free, richCreated, bad)
	}
	entries := checkLedger(t, st, account, 0)
	reservations := 0
	for _, e := range entries {
		if e.Kind == storage.CreditReservation {
			reservations++
			if e.Amount != -9 {
				t.Errorf("reservation of %d", e.Amount)
			}
			if _, err := st.GetJob(ctx(t), account, e.JobID); err != nil {
				t.Errorf("reservation for job %s, which does not exist: %v", e.JobID, err)
			}
		}
	}
	if reservations != 17 {
		t.Fatalf("%d reservations, want 17", reservations)
	}
	checkLedger(t, st, rich, 1000-20*9)
	jobs, err := st.ListJobs(ctx(t), account, storage.JobQuery{Limit: 100})
	if err != nil || len(jobs) != 37 {
		t.Fatalf("account has %d jobs, %v; want 17 priced + 20 unpriced", len(jobs), err)
	}
}

// testRefusedForCredits: a refused create writes nothing, frees its
// idempotency key, and a duplicate wins over a short balance.
func testRefusedForCredits(t *testing.T, st storage.Store) {
	account, pool := newID(), newID()
	price := storage.JobPrice{PerJob: 5, Reserve: 5}
	first := pricedJob(account, pool, price)
	first.IdempotencyKey = "k1"
	if _, err := st.CreateJob(ctx(t), first); !errors.Is(err, storage.ErrInsufficientCredits) {
		t.Fatalf("create without credits: %v", err)
	}
	if _, err := st.GetJob(ctx(t), account, first.ID); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("refused job exists: %v", err)
	}
	mustGrant(t, st, account, 5)
	retry := pricedJob(account, pool, price)
	retry.IdempotencyKey = "k1"
	mustCreateJob(t, st, retry)
	dup := pricedJob(account, pool, price)
	dup.IdempotencyKey = "k1"
	if _, err := st.CreateJob(ctx(t), dup); !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("duplicate key with a short balance: %v, want ErrDuplicate", err)
	}
	checkLedger(t, st, account, 0)
	if _, err := st.CreateJob(ctx(t), pricedJob(account, pool, storage.JobPrice{PerJob: 5, Reserve: 4})); err == nil {
		t.Error("a price whose reserve is below the per-job charge was accepted")
	}
}

// testSettlementPerOutcome ends one priced job on every path and checks
// each is settled once, for the amount the rule gives.
func testSettlementPerOutcome(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	price := storage.JobPrice{PerJob: 10, Reserve: 50}
	mustGrant(t, st, account, 1000)
	lost := json.RawMessage(`{"code":"worker_lost","message":"x"}`)
	outcomes := []struct {
		name    string
		end     func(t *testing.T, id string) storage.Job
		status  string
		charged int64
	}{
		{"succeeded", func(t *testing.T, id string) storage.Job {
			return finish(t, st, claimID(t, st, fs, pool, id), storage.JobSucceeded, nil)
		}, storage.JobSucceeded, 10},
		{"failed by the workflow", func(t *testing.T, id string) storage.Job {
			return finish(t, st, claimID(t, st, fs, pool, id), storage.JobFailed,
				json.RawMessage(`{"code":"node_execution_error","message":"boom"}`))
		}, storage.JobFailed, 10},
		{"failed by the platform", func(t *testing.T, id string) storage.Job {
			return finish(t, st, claimID(t, st, fs, pool, id), storage.JobFailed,
				json.RawMessage(`{"code":"execution_failed","message":"x"}`))
		}, storage.JobFailed, 0},
		{"worker lost at the last attempt", func(t *testing.T, id string) storage.Job {
			j := claimID(t, st, fs, pool, id)
			got, err := st.ReleaseJob(ctx(t), j.ID, j.Attempt, 1, lost)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}, storage.JobFailed, 0},
		{"reclaimed at the last attempt", func(t *testing.T, id string) storage.Job {
			claimID(t, st, fs, pool, id)
			return only(t, reclaimAt(t, st, time.Now().Add(2*time.Minute), 1), id)
		}, storage.JobFailed, 0},
		{"canceled while queued", func(t *testing.T, id string) storage.Job {
			j, err := st.CancelJob(ctx(t), account, id)
			if err != nil {
				t.Fatal(err)
			}
			return j
		}, storage.JobCanceled, 0},
		{"canceled while queued with its deployment", func(t *testing.T, id string) storage.Job {
			return only(t, cancelDeployment(t, st), id)
		}, storage.JobCanceled, 0},
		{"canceled while running", func(t *testing.T, id string) storage.Job {
			j := claimID(t, st, fs, pool, id)
			if _, err := st.CancelJob(ctx(t), account, id); err != nil {
				t.Fatal(err)
			}
			return finish(t, st, j, storage.JobCanceled, nil)
		}, storage.JobCanceled, 10},
		{"canceling, its worker gone", func(t *testing.T, id string) storage.Job {
			claimID(t, st, fs, pool, id)
			if _, err := st.CancelJob(ctx(t), account, id); err != nil {
				t.Fatal(err)
			}
			return only(t, reclaimAt(t, st, time.Now().Add(2*time.Minute), 3), id)
		}, storage.JobCanceled, 10},
		{"expired while queued", func(t *testing.T, id string) storage.Job {
			return only(t, expireAt(t, st, time.Now().Add(48*time.Hour)), id)
		}, storage.JobExpired, 0},
		{"expired while running", func(t *testing.T, id string) storage.Job {
			claimID(t, st, fs, pool, id)
			return only(t, expireAt(t, st, time.Now().Add(48*time.Hour)), id)
		}, storage.JobExpired, 10},
	}
	balance := int64(1000)
	for _, o := range outcomes {
		j := pricedJob(account, pool, price)
		j.DeploymentID = settleDeployment
		job := mustCreateJob(t, st, j)
		checkLedger(t, st, account, balance-50)
		ended := o.end(t, job.ID)
		if ended.Status != o.status {
			t.Fatalf("%s: status %s, want %s", o.name, ended.Status, o.status)
		}
		if ended.Credits == nil || ended.Credits.Charged == nil || *ended.Credits.Charged != o.charged {
			t.Fatalf("%s: credits %+v, want charged %d", o.name, ended.Credits, o.charged)
		}
		balance -= o.charged
		entries := checkLedger(t, st, account, balance)
		kind := storage.CreditSettlement
		if o.charged == 0 {
			kind = storage.CreditRefund
		}
		ends := append(entriesFor(entries, storage.CreditSettlement, job.ID), entriesFor(entries, storage.CreditRefund, job.ID)...)
		if len(ends) != 1 || ends[0].Kind != kind || ends[0].Charged != o.charged || ends[0].Amount != 50-o.charged {
			t.Fatalf("%s: entries ending the job = %+v", o.name, ends)
		}
		if got := mustGetJob(t, st, account, job.ID); got.Credits == nil || got.Credits.Charged == nil ||
			*got.Credits.Charged != o.charged {
			t.Fatalf("%s: GetJob credits %+v", o.name, got.Credits)
		}
	}
}

// testChargeLastAttempt: the per-second charge counts the attempt that
// ended the job, not one its worker lost, and is capped at the reserve.
func testChargeLastAttempt(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustGrant(t, st, account, 10_000)
	job := mustCreateJob(t, st, pricedJob(account, pool, storage.JobPrice{PerJob: 1, PerSecond: 1000, Reserve: 5000}))
	first := claimID(t, st, fs, pool, job.ID)
	time.Sleep(300 * time.Millisecond) // the lost attempt's time: not charged
	if _, err := st.ReleaseJob(ctx(t), first.ID, first.Attempt, 3, nil); err != nil {
		t.Fatal(err)
	}
	second := claimID(t, st, fs, pool, job.ID)
	time.Sleep(20 * time.Millisecond)
	ended := finish(t, st, second, storage.JobSucceeded, nil)
	entries := checkLedger(t, st, account, 10_000-*ended.Credits.Charged)
	s := entriesFor(entries, storage.CreditSettlement, job.ID)
	if len(s) != 1 {
		t.Fatalf("settlements = %+v", s)
	}
	if s[0].RunMS < 20 || s[0].RunMS >= 300 || s[0].Charged != storage.JobCharge(*ended.Credits, s[0].RunMS) {
		t.Fatalf("settlement %+v: run %d ms, want the last attempt's (20..300 ms), charged per JobCharge", s[0], s[0].RunMS)
	}
	// A long run is capped at the reserve.
	capped := mustCreateJob(t, st, pricedJob(account, pool, storage.JobPrice{PerJob: 1, PerSecond: 1000, Reserve: 30}))
	c := claimID(t, st, fs, pool, capped.ID)
	time.Sleep(50 * time.Millisecond)
	if got := finish(t, st, c, storage.JobSucceeded, nil); *got.Credits.Charged != 30 {
		t.Fatalf("capped charge = %d, want the reserve 30", *got.Credits.Charged)
	}
}

// testUnpricedJobs: a job created without a price has no Credits and
// writes no ledger entries, whatever its account's ledger holds.
func testUnpricedJobs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustGrant(t, st, account, 5)
	job := mustCreateJob(t, st, newJob(account, pool))
	if job.Credits != nil {
		t.Fatalf("unpriced job credits = %+v", job.Credits)
	}
	done := finish(t, st, claimID(t, st, fs, pool, job.ID), storage.JobSucceeded, nil)
	if done.Credits != nil || mustGetJob(t, st, account, job.ID).Credits != nil {
		t.Fatalf("unpriced job credits after the end = %+v", done.Credits)
	}
	if entries := checkLedger(t, st, account, 5); len(entries) != 1 {
		t.Fatalf("ledger = %+v, want the grant only", entries)
	}
}

// settleDeployment is the deployment of testSettlementPerOutcome's jobs.
const settleDeployment = "settle-dep"

// cancelDeployment cancels settleDeployment's open jobs.
func cancelDeployment(t *testing.T, st storage.Store) []storage.Job {
	t.Helper()
	jobs, err := st.CancelDeploymentJobs(ctx(t), settleDeployment)
	if err != nil {
		t.Fatalf("CancelDeploymentJobs: %v", err)
	}
	return jobs
}

// claimID claims the pool's next job, which must be id.
func claimID(t *testing.T, st storage.Store, fs *fakeFS, pool, id string) storage.Job {
	t.Helper()
	j := mustClaim(t, st, fs, pool)
	if j.ID != id {
		t.Fatalf("claimed %s, want %s", j.ID, id)
	}
	return j
}

// finish ends the attempt, failing the test on error.
func finish(t *testing.T, st storage.Store, j storage.Job, status string, jobErr json.RawMessage) storage.Job {
	t.Helper()
	got, err := st.FinishJob(ctx(t), j.ID, j.Attempt, status, jobErr)
	if err != nil {
		t.Fatalf("FinishJob(%s): %v", status, err)
	}
	return got
}

// only returns the job with id from jobs, which must hold it alone.
func only(t *testing.T, jobs []storage.Job, id string) storage.Job {
	t.Helper()
	if len(jobs) != 1 || jobs[0].ID != id {
		t.Fatalf("changed %d jobs, want only %s", len(jobs), id)
	}
	return jobs[0]
}

// expireAt runs ExpireJobs as if the clock read at (running bound: 1h).
func expireAt(t *testing.T, st storage.Store, at time.Time) []storage.Job {
	t.Helper()
	jobs, err := st.ExpireJobs(ctx(t), at, at.Add(-time.Hour), 100)
	if err != nil {
		t.Fatalf("ExpireJobs: %v", err)
	}
	return jobs
}
