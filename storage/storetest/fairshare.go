package storetest

import (
	"errors"
	"testing"

	"github.com/comfygate/comfygate/storage"
)

// fairShareCases cover the claim order across accounts and the
// per-account bounds (see the storage package's fair-share note).
var fairShareCases = []storeCase{
	{"RoundRobinAcrossAccounts", testRoundRobin},
	{"AccountMaxRunning", testAccountMaxRunning},
	{"AccountMaxQueued", testAccountMaxQueued},
	{"FairAdmission", testFairAdmission},
	{"RequeuedJobKeepsItsPlace", testRequeuedKeepsPlace},
	{"DeepQueuePosition", testDeepQueuePosition},
}

// testRequeuedKeepsPlace: a job handed back to the queue goes first, as
// the oldest, even when the queue emptied and filled again meanwhile.
func testRequeuedKeepsPlace(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustCreateJob(t, st, newJob(account, pool))
	second := mustCreateJob(t, st, newJob(account, pool))
	mustClaim(t, st, fs, pool)
	lost := mustClaim(t, st, fs, pool) // second, with the later turn
	if lost.ID != second.ID {
		t.Fatalf("claimed %s, want %s", lost.ID, second.ID)
	}
	later := []storage.Job{mustCreateJob(t, st, newJob(account, pool)), mustCreateJob(t, st, newJob(account, pool))}
	if _, err := st.ReleaseJob(ctx(t), lost.ID, lost.Attempt, 3, nil); err != nil {
		t.Fatal(err)
	}
	if pos := mustGetJob(t, st, account, lost.ID).QueuePosition; pos != 1 {
		t.Errorf("requeued job at position %d, want 1", pos)
	}
	for _, want := range []string{lost.ID, later[0].ID, later[1].ID} {
		if got := mustClaim(t, st, fs, pool); got.ID != want {
			t.Fatalf("claimed %s, want %s (the requeued job first, then in order)", got.ID, want)
		}
	}
}

// claimOrder claims n jobs of pool and returns their accounts in order.
func claimOrder(t *testing.T, st storage.Store, fs *fakeFS, pool string, n, maxRunning int) []string {
	t.Helper()
	var got []string
	for range n {
		j, err := st.ClaimJob(ctx(t), pool, "w", 60e9, maxRunning, fs.remove)
		if err != nil {
			t.Fatalf("ClaimJob after %v: %v", got, err)
		}
		got = append(got, j.AccountID)
	}
	return got
}

func testRoundRobin(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a, b, c, pool := "a-"+newID(), "b-"+newID(), "c-"+newID(), newID()
	var aJobs []storage.Job
	for range 5 {
		aJobs = append(aJobs, mustCreateJob(t, st, newJob(a, pool)))
	}
	// A's first job runs; then B and C submit one each, B another.
	if got := claimOrder(t, st, fs, pool, 1, 0); got[0] != a {
		t.Fatalf("first claim went to %s", got[0])
	}
	bJob := mustCreateJob(t, st, newJob(b, pool))
	mustCreateJob(t, st, newJob(c, pool))
	mustCreateJob(t, st, newJob(b, pool))
	// B's first job is second in line, behind A's front job: the position
	// says so, and the claims go round-robin.
	if pos := mustGetJob(t, st, b, bJob.ID).QueuePosition; pos != 2 {
		t.Errorf("B's queue position = %d, want 2 (behind A's front job)", pos)
	}
	if bJob.QueuePosition != 2 {
		t.Errorf("B's position at create = %d, want 2", bJob.QueuePosition)
	}
	if pos := mustGetJob(t, st, a, aJobs[4].ID).QueuePosition; pos != 7 {
		t.Errorf("A's last job's position = %d, want 7 (the back)", pos)
	}
	want := []string{a, b, c, a, b, a, a}
	got := claimOrder(t, st, fs, pool, len(want), 0)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("claim order %v, want %v", short(got), short(want))
		}
	}
	if _, err := st.ClaimJob(ctx(t), pool, "w", 60e9, 0, fs.remove); !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("claim of an empty queue: %v", err)
	}
}

func short(accounts []string) []string {
	out := make([]string, len(accounts))
	for i, a := range accounts {
		out[i] = a[:1]
	}
	return out
}

func testAccountMaxRunning(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a, b, pool := "a-"+newID(), "b-"+newID(), newID()
	for range 4 {
		mustCreateJob(t, st, newJob(a, pool))
	}
	mustCreateJob(t, st, newJob(b, pool))
	// A may run 2 at once: the third claim passes A over for B, the fourth
	// finds A at its bound and nothing else.
	got := claimOrder(t, st, fs, pool, 3, 2)
	if got[0] != a || got[1] != b || got[2] != a {
		t.Fatalf("claims %v, want a b a", short(got))
	}
	j, err := st.ClaimJob(ctx(t), pool, "w", 60e9, 2, fs.remove)
	if !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("claim with A at its bound = %s, %v; want ErrNotFound", j.AccountID, err)
	}
	// Without a bound A's remaining jobs are claimed.
	if got := claimOrder(t, st, fs, pool, 1, 0); got[0] != a {
		t.Fatalf("unbounded claim went to %s", got[0])
	}
}

func testAccountMaxQueued(t *testing.T, st storage.Store) {
	a, b, pool := newID(), newID(), newID()
	bounded := func(account string) storage.NewJob {
		j := newJob(account, pool)
		j.AccountMaxQueued, j.MaxQueued = 3, 100
		return j
	}
	for range 3 {
		mustCreateJob(t, st, bounded(a))
	}
	over := bounded(a)
	over.IdempotencyKey = "k"
	_, err := st.CreateJob(ctx(t), over)
	if !errors.Is(err, storage.ErrAccountQueueFull) || !errors.Is(err, storage.ErrQueueFull) {
		t.Fatalf("A over its bound: %v, want ErrAccountQueueFull (an ErrQueueFull)", err)
	}
	mustCreateJob(t, st, bounded(b)) // B is not affected
	again := bounded(a)
	again.IdempotencyKey = "k" // the refused key was not taken
	if _, err := st.CreateJob(ctx(t), again); !errors.Is(err, storage.ErrAccountQueueFull) {
		t.Fatalf("A again: %v", err)
	}
	if _, err := st.CancelJob(ctx(t), a, mustList(t, st, a)[0].ID); err != nil {
		t.Fatal(err)
	}
	mustCreateJob(t, st, again)
}

func mustList(t *testing.T, st storage.Store, account string) []storage.Job {
	t.Helper()
	jobs, err := st.ListJobs(ctx(t), account, storage.JobQuery{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}
