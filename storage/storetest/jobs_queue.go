package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// The queue cases: claim order, exclusive claims and the cancel state machine.

func testClaimFIFO(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	if other := mustCreateJob(t, st, newJob(account, newID())); other.QueuePosition != 1 {
		t.Errorf("CreateJob in an empty pool: QueuePosition = %d, want 1", other.QueuePosition)
	}
	var queued []storage.Job
	for i := range 5 {
		j := mustCreateJob(t, st, newJob(account, pool))
		if j.QueuePosition != i+1 {
			t.Errorf("CreateJob %d: QueuePosition = %d, want %d", i, j.QueuePosition, i+1)
		}
		queued = append(queued, j)
		waitClockTick()
	}
	for i, j := range queued {
		if pos, err := st.QueuePosition(ctx(t), j.ID); err != nil || pos != i+1 {
			t.Errorf("QueuePosition(job %d) = %d, %v; want %d", i, pos, err, i+1)
		}
		if got := mustGetJob(t, st, account, j.ID); got.QueuePosition != i+1 {
			t.Errorf("GetJob(job %d).QueuePosition = %d, want %d", i, got.QueuePosition, i+1)
		}
	}
	for i, want := range queued {
		got := mustClaim(t, st, fs, pool)
		if got.ID != want.ID {
			t.Fatalf("claim %d took job %s, want the oldest queued %s", i, got.ID, want.ID)
		}
		if got.Status != storage.JobRunning || got.Attempt != 1 || got.StartedAt == nil ||
			got.CompletedAt != nil || got.Outputs == nil || len(got.Outputs) != 0 {
			t.Errorf("claimed job: status %s attempt %d started %v completed %v outputs %#v; want running, 1, set, nil, empty",
				got.Status, got.Attempt, got.StartedAt, got.CompletedAt, got.Outputs)
		}
		if d := diffJob(mustGetJob(t, st, account, got.ID), got); d != "" {
			t.Errorf("GetJob after claim differs from ClaimJob: %s", d)
		}
		if pos, err := st.QueuePosition(ctx(t), got.ID); err != nil || pos != 0 {
			t.Errorf("QueuePosition of a running job = %d, %v; want 0", pos, err)
		}
		if got.QueuePosition != 0 || mustGetJob(t, st, account, got.ID).QueuePosition != 0 {
			t.Errorf("a running job carries a QueuePosition (ClaimJob %d, GetJob %d); want 0",
				got.QueuePosition, mustGetJob(t, st, account, got.ID).QueuePosition)
		}
		if i+1 < len(queued) {
			last := queued[len(queued)-1].ID
			if pos, err := st.QueuePosition(ctx(t), last); err != nil || pos != len(queued)-i-1 {
				t.Errorf("after %d claims, QueuePosition(last) = %d, %v; want %d", i+1, pos, err, len(queued)-i-1)
			}
			if pos := mustGetJob(t, st, account, last).QueuePosition; pos != len(queued)-i-1 {
				t.Errorf("after %d claims, GetJob(last).QueuePosition = %d; want %d", i+1, pos, len(queued)-i-1)
			}
		}
	}
	_, err := st.ClaimJob(ctx(t), pool, "w", time.Minute, 0, failRemove(t))
	wantNotFound(t, "ClaimJob on an empty queue", err)
	for _, id := range []string{newID(), "not-a-uuid"} {
		if pos, err := st.QueuePosition(ctx(t), id); err != nil || pos != 0 {
			t.Errorf("QueuePosition(%q) = %d, %v; want 0, nil", id, pos, err)
		}
	}
}

func testConcurrentJobClaims(t *testing.T, st storage.Store) {
	const jobs, claimers = 20, 8
	fs := newFakeFS()
	account, pool := newID(), newID()
	created := map[string]bool{}
	for range jobs {
		created[mustCreateJob(t, st, newJob(account, pool)).ID] = true
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		claimed = map[string]int{}
	)
	for w := range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				j, err := st.ClaimJob(ctx(t), pool, fmt.Sprint("worker-", w), time.Minute, 0, fs.remove)
				if errors.Is(err, storage.ErrNotFound) {
					return
				}
				if err != nil {
					t.Errorf("worker %d: ClaimJob: %v", w, err)
					return
				}
				mu.Lock()
				claimed[j.ID]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(claimed) != jobs {
		t.Errorf("%d distinct jobs claimed, want %d", len(claimed), jobs)
	}
	for id, n := range claimed {
		if n != 1 || !created[id] {
			t.Errorf("job %s claimed %d times (created here: %v), want once", id, n, created[id])
		}
	}
}

func testCancelStateMachine(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()

	queued := mustCreateJob(t, st, newJob(account, pool))
	canceledQueued, err := st.CancelJob(ctx(t), account, queued.ID)
	if err != nil || canceledQueued.Status != storage.JobCanceled || canceledQueued.CompletedAt == nil || canceledQueued.Outputs == nil {
		t.Fatalf("cancel queued = %+v, %v; want canceled with CompletedAt and empty Outputs", canceledQueued, err)
	}
	if pos := mustGetJob(t, st, account, queued.ID).QueuePosition; pos != 0 {
		t.Errorf("GetJob of a canceled job: QueuePosition = %d, want 0", pos)
	}
	_, err = st.ClaimJob(ctx(t), pool, "w", time.Minute, 0, fs.remove)
	wantNotFound(t, "ClaimJob after the only queued job was canceled", err)

	running := mustCreateJob(t, st, newJob(account, pool))
	mustClaim(t, st, fs, pool)
	if got, err := st.CancelJob(ctx(t), account, running.ID); err != nil || got.Status != storage.JobCanceling || got.CompletedAt != nil {
		t.Fatalf("cancel running = %s, %v; want canceling, not completed", got.Status, err)
	}
	if status, err := st.RenewLease(ctx(t), running.ID, 1, time.Minute); err != nil || status != storage.JobCanceling {
		t.Errorf("RenewLease of a canceling job = %q, %v; want canceling", status, err)
	}
	if got, err := st.CancelJob(ctx(t), account, running.ID); err != nil || got.Status != storage.JobCanceling {
		t.Errorf("cancel canceling = %s, %v; want canceling unchanged", got.Status, err)
	}
	done, err := st.FinishJob(ctx(t), running.ID, 1, storage.JobCanceled, nil)
	if err != nil || done.Status != storage.JobCanceled || done.CompletedAt == nil {
		t.Fatalf("FinishJob(canceled) = %s, %v; want canceled", done.Status, err)
	}

	// An attempt that ends some other way once its cancel was taken ends
	// canceled: the contract has canceling lead only there (a job that
	// succeeded while its cancel was on its way read succeeded).
	for _, reported := range []string{storage.JobSucceeded, storage.JobFailed} {
		late := mustCreateJob(t, st, newJob(account, pool))
		mustClaim(t, st, fs, pool)
		if _, err := st.CancelJob(ctx(t), account, late.ID); err != nil {
			t.Fatal(err)
		}
		got, err := st.FinishJob(ctx(t), late.ID, 1, reported, json.RawMessage(`{"code":"node_execution_error","message":"m"}`))
		if err != nil || got.Status != storage.JobCanceled || got.Error != nil || got.CompletedAt == nil {
			t.Errorf("FinishJob(%s) of a canceling job = %s (error %s), %v; want canceled without an error object",
				reported, got.Status, got.Error, err)
		}
		if again := mustGetJob(t, st, account, late.ID); again.Status != storage.JobCanceled {
			t.Errorf("GetJob after FinishJob(%s) of a canceling job: %s, want canceled", reported, again.Status)
		}
	}

	succeeded := mustCreateJob(t, st, newJob(account, pool))
	mustClaim(t, st, fs, pool)
	fin, err := st.FinishJob(ctx(t), succeeded.ID, 1, storage.JobSucceeded, json.RawMessage(`{"ignored":true}`))
	if err != nil || fin.Error != nil {
		t.Fatalf("FinishJob(succeeded) = error %s, %v; want no error object", fin.Error, err)
	}
	for _, terminal := range []storage.Job{canceledQueued, done, fin} {
		after, err := st.CancelJob(ctx(t), account, terminal.ID)
		if err != nil {
			t.Fatalf("cancel %s job: %v", terminal.Status, err)
		}
		if d := diffJob(after, terminal); d != "" {
			t.Errorf("cancel of a %s job changed it: %s", terminal.Status, d)
		}
	}
	misses := []struct{ name, account, id string }{
		{"other account", newID(), queued.ID},
		{"unknown id", account, newID()},
		{"malformed id", account, "not-a-uuid"},
	}
	for _, m := range misses {
		_, err := st.CancelJob(ctx(t), m.account, m.id)
		wantNotFound(t, "CancelJob "+m.name, err)
	}
}
