package storetest

import (
	"testing"

	"github.com/comfygate/comfygate/storage"
)

// testDeepQueuePosition: past storage.ExactQueuePositions jobs ahead the
// position is estimated (see storage.EstimateQueuePosition). One account's
// backlog holds one job per turn, so there the estimate is the exact place,
// through claims; once another account's jobs are interleaved it stays
// within the queue's bounds and close to the place.
func testDeepQueuePosition(t *testing.T, st storage.Store) {
	const n = storage.ExactQueuePositions + 100
	fs := newFakeFS()
	a, b, pool := newID(), newID(), newID()
	jobs := make([]storage.Job, n)
	for i := range jobs {
		jobs[i] = mustCreateJob(t, st, newJob(a, pool))
		if jobs[i].QueuePosition != i+1 {
			t.Fatalf("CreateJob %d: QueuePosition = %d, want %d", i, jobs[i].QueuePosition, i+1)
		}
	}
	check := func(when string, i, want int) {
		t.Helper()
		if got := mustGetJob(t, st, a, jobs[i].ID).QueuePosition; got != want {
			t.Errorf("%s: GetJob(job %d).QueuePosition = %d, want %d", when, i, got, want)
		}
		if got, err := st.QueuePosition(ctx(t), jobs[i].ID); err != nil || got != want {
			t.Errorf("%s: QueuePosition(job %d) = %d, %v; want %d", when, i, got, err, want)
		}
	}
	for _, i := range []int{0, storage.ExactQueuePositions - 1, storage.ExactQueuePositions, n - 1} {
		check("one account's backlog", i, i+1)
	}
	for range 60 {
		mustClaim(t, st, fs, pool)
	}
	check("after 60 claims", n-1, n-60)
	check("after 60 claims", 60, 1)

	// Another account's jobs take the turns from the front: each one is
	// counted exactly, and everything behind them moves back by ten.
	for k := range 10 {
		j := mustCreateJob(t, st, newJob(b, pool))
		if want := 2*k + 2; j.QueuePosition != want {
			t.Errorf("B's job %d: QueuePosition = %d, want %d", k, j.QueuePosition, want)
		}
	}
	queued := n - 60 + 10
	got := mustGetJob(t, st, a, jobs[n-1].ID).QueuePosition
	if got <= storage.ExactQueuePositions || got > queued || queued-got > queued/100 {
		t.Errorf("A's last job with B's jobs ahead: QueuePosition = %d, want within 1%% below %d and above %d",
			got, queued, storage.ExactQueuePositions)
	}
}
