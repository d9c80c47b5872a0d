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

// jobLeaseCases cover attempts: leases, outputs, reclaim and retention.
// Lease expiry is simulated by passing ReclaimExpired a "now" past the
// lease, never by sleeping.
var jobLeaseCases = []storeCase{
	{"RenewLease", testRenewLease},
	{"OutputsAndProgress", testOutputsAndProgress},
	{"StaleAttemptRejected", testStaleAttemptRejected},
	{"ReclaimDropsEarlierOutputs", testReclaimDropsEarlierOutputs},
	{"MaxAttemptsFails", testMaxAttemptsFails},
	{"ReleaseJob", testReleaseJob},
	{"ReclaimCanceling", testReclaimCanceling},
	{"ExpireJobs", testExpireJobs},
	{"ExpireJobsManyAtOnce", testExpireJobsManyAtOnce},
	{"AssetInUse", testAssetInUse},
	{"TraceParentKept", testTraceParentKept},
}

// newOutput returns an output over hash for node.
func newOutput(node, hash string) storage.NewOutput {
	return storage.NewOutput{
		NodeID: node, Name: "ComfyUI_" + node + ".png", Type: "image",
		Asset: storage.NewAsset{
			ID: newID(), Hash: hash, SizeBytes: 99, ContentType: "image/png",
			FilePath: "output/ComfyUI_" + node + ".png", Tags: []string{"output"},
		},
	}
}

// mustAddOutput commits an output for the attempt and fails the test on error.
func mustAddOutput(t *testing.T, st storage.Store, fs *fakeFS, job storage.Job, out storage.NewOutput) storage.Output {
	t.Helper()
	o, err := st.AddOutput(ctx(t), job.ID, job.Attempt, out, fs.publish(out.Asset.Hash))
	if err != nil {
		t.Fatalf("AddOutput(%s): %v", out.NodeID, err)
	}
	return o
}

// reclaimAt runs ReclaimExpired as if the clock read at, failing on error.
func reclaimAt(t *testing.T, st storage.Store, at time.Time, maxAttempts int) []storage.Job {
	t.Helper()
	jobs, err := st.ReclaimExpired(ctx(t), at, maxAttempts, json.RawMessage(`{"code":"worker_lost"}`))
	if err != nil {
		t.Fatalf("ReclaimExpired: %v", err)
	}
	return jobs
}

func testRenewLease(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustCreateJob(t, st, newJob(account, pool))
	job := mustClaim(t, st, fs, pool) // lease: one minute
	if status, err := st.RenewLease(ctx(t), job.ID, job.Attempt, 2*time.Hour); err != nil || status != storage.JobRunning {
		t.Fatalf("RenewLease = %q, %v; want running", status, err)
	}
	// The renewed lease outlives the original one.
	if got := reclaimAt(t, st, time.Now().Add(time.Hour), 3); len(got) != 0 {
		t.Errorf("ReclaimExpired an hour on reclaimed %d jobs, want none under a 2h lease", len(got))
	}
	refused := []struct {
		name    string
		id      string
		attempt int
	}{
		{"wrong attempt", job.ID, job.Attempt + 1},
		{"earlier attempt", job.ID, job.Attempt - 1},
		{"unknown job", newID(), 1},
		{"malformed id", "not-a-uuid", 1},
	}
	for _, r := range refused {
		if _, err := st.RenewLease(ctx(t), r.id, r.attempt, time.Minute); !errors.Is(err, storage.ErrLeaseLost) {
			t.Errorf("RenewLease %s: err = %v, want ErrLeaseLost", r.name, err)
		}
	}
	if got := reclaimAt(t, st, time.Now().Add(3*time.Hour), 3); len(got) != 1 || got[0].Status != storage.JobQueued {
		t.Fatalf("ReclaimExpired past the lease = %+v, want the job queued again", got)
	}
	if _, err := st.RenewLease(ctx(t), job.ID, job.Attempt, time.Minute); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("RenewLease after reclaim: err = %v, want ErrLeaseLost", err)
	}
}

func testOutputsAndProgress(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustCreateJob(t, st, newJob(account, pool))
	job := mustClaim(t, st, fs, pool)

	progress := json.RawMessage(`{"value": 0.5,"nodes_done":1 , "message":"é"}`)
	if err := st.SetProgress(ctx(t), job.ID, job.Attempt, progress); err != nil {
		t.Fatalf("SetProgress: %v", err)
	}
	shared := hashOf("shared")
	mustCreate(t, st, fs, newAsset(account, shared)) // the account already holds these bytes
	ins := []storage.NewOutput{newOutput("9", hashOf("a")), newOutput("3", shared), newOutput("12", hashOf("b"))}
	ins[0].Folder, ins[2].Folder = "temp", "output" // ins[1] has none, as before migration 0011
	var outs []storage.Output
	for _, in := range ins {
		o := mustAddOutput(t, st, fs, job, in)
		want := expectFromNew(in.Asset, o.Asset.CreatedAt)
		want.AccountID, want.JobID = account, job.ID
		if d := diffAsset(o.Asset, want); d != "" {
			t.Errorf("AddOutput(%s).Asset: %s", in.NodeID, d)
		}
		if o.NodeID != in.NodeID || o.Name != in.Name || o.Type != in.Type || o.Folder != in.Folder {
			t.Errorf("AddOutput = %s/%s/%s/%q, want %s/%s/%s/%q", o.NodeID, o.Name, o.Type, o.Folder, in.NodeID, in.Name, in.Type, in.Folder)
		}
		if n := fs.publishCount(in.Asset.Hash); !fs.has(in.Asset.Hash) || n == 0 {
			t.Errorf("output %s: bytes present %v after %d publishes", in.NodeID, fs.has(in.Asset.Hash), n)
		}
		stored, err := st.GetAsset(ctx(t), account, in.Asset.ID)
		if err != nil {
			t.Fatalf("GetAsset of an output: %v", err)
		}
		if d := diffAsset(stored, o.Asset); d != "" {
			t.Errorf("GetAsset of output %s: %s", in.NodeID, d)
		}
		outs = append(outs, o)
	}
	got := mustGetJob(t, st, account, job.ID)
	if string(got.Progress) != string(progress) {
		t.Errorf("Progress = %s, want %s byte for byte", got.Progress, progress)
	}
	if len(got.Outputs) != len(outs) {
		t.Fatalf("GetJob has %d outputs, want %d", len(got.Outputs), len(outs))
	}
	for i, o := range got.Outputs {
		if o.Folder != outs[i].Folder {
			t.Errorf("output %d: Folder %q, want %q", i, o.Folder, outs[i].Folder)
		}
		if o.NodeID != outs[i].NodeID || diffAsset(o.Asset, outs[i].Asset) != "" {
			t.Errorf("output %d = node %s asset %s, want node %s asset %s (commit order)", i, o.NodeID, o.Asset.ID, outs[i].NodeID, outs[i].Asset.ID)
		}
	}
	if err := st.SetProgress(ctx(t), job.ID, job.Attempt, nil); err != nil {
		t.Fatalf("SetProgress(nil): %v", err)
	}
	done, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobSucceeded, nil)
	if err != nil {
		t.Fatalf("FinishJob: %v", err)
	}
	if done.Status != storage.JobSucceeded || done.CompletedAt == nil || done.Progress != nil || len(done.Outputs) != len(outs) {
		t.Errorf("FinishJob = status %s completed %v progress %s outputs %d; want succeeded, set, nil, %d",
			done.Status, done.CompletedAt, done.Progress, len(done.Outputs), len(outs))
	}
	if _, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobSucceeded, nil); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("second FinishJob: err = %v, want ErrLeaseLost", err)
	}
	if _, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobRunning, nil); err == nil || errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("FinishJob(running): err = %v, want a refusal of the status", err)
	}
}

func testStaleAttemptRejected(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustCreateJob(t, st, newJob(account, pool))
	first := mustClaim(t, st, fs, pool)
	requeued := reclaimAt(t, st, time.Now().Add(time.Hour), 3)
	if len(requeued) != 1 || requeued[0].Status != storage.JobQueued || requeued[0].Attempt != 1 {
		t.Fatalf("ReclaimExpired = %+v, want the job queued with Attempt still 1", requeued)
	}
	second := mustClaim(t, st, fs, pool)
	if second.ID != first.ID || second.Attempt != 2 || !second.StartedAt.Equal(*first.StartedAt) {
		t.Fatalf("second claim = %s attempt %d started %v; want %s attempt 2 started %v (first attempt's start)",
			second.ID, second.Attempt, second.StartedAt, first.ID, first.StartedAt)
	}
	stale := hashOf("stale")
	writes := []struct {
		name string
		call func() error
	}{
		{"SetProgress", func() error {
			return st.SetProgress(ctx(t), first.ID, first.Attempt, json.RawMessage(`{"value":1}`))
		}},
		{"AddOutput", func() error {
			_, err := st.AddOutput(ctx(t), first.ID, first.Attempt, newOutput("1", stale), fs.publish(stale))
			return err
		}},
		{"RenewLease", func() error { _, err := st.RenewLease(ctx(t), first.ID, first.Attempt, time.Minute); return err }},
		{"FinishJob", func() error {
			_, err := st.FinishJob(ctx(t), first.ID, first.Attempt, storage.JobSucceeded, nil)
			return err
		}},
	}
	for _, w := range writes {
		if err := w.call(); !errors.Is(err, storage.ErrLeaseLost) {
			t.Errorf("stale attempt %s: err = %v, want ErrLeaseLost", w.name, err)
		}
	}
	if n := fs.publishCount(stale); n != 0 {
		t.Errorf("a stale AddOutput published bytes %d times, want 0", n)
	}
	got := mustGetJob(t, st, account, first.ID)
	if d := diffJob(got, second); d != "" || len(got.Outputs) != 0 {
		t.Errorf("job after the stale writes: %s, %d outputs; want it as the second claim left it", d, len(got.Outputs))
	}
	if _, err := st.RenewLease(ctx(t), second.ID, second.Attempt, time.Minute); err != nil {
		t.Errorf("current attempt RenewLease: %v", err)
	}
}

func testReclaimDropsEarlierOutputs(t *testing.T, st storage.Store) {
	tests := []struct {
		name       string
		shared     bool // an upload of the account holds the same bytes
		wantRemove int
	}{
		{"sole reference", false, 1},
		{"bytes shared with an upload", true, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := newFakeFS()
			account, pool := newID(), newID()
			hash := hashOf("attempt-1")
			if tc.shared {
				mustCreate(t, st, fs, newAsset(account, hash))
			}
			mustCreateJob(t, st, newJob(account, pool))
			first := mustClaim(t, st, fs, pool)
			if err := st.SetProgress(ctx(t), first.ID, first.Attempt, json.RawMessage(`{"value":0.9}`)); err != nil {
				t.Fatalf("SetProgress: %v", err)
			}
			old := mustAddOutput(t, st, fs, first, newOutput("9", hash))
			reclaimAt(t, st, time.Now().Add(time.Hour), 3)
			if n := fs.removeCount(hash); n != 0 {
				t.Errorf("ReclaimExpired removed bytes %d times; the next claim does that", n)
			}
			second := mustClaim(t, st, fs, pool)
			if len(second.Outputs) != 0 || second.Progress != nil {
				t.Errorf("second claim: %d outputs, progress %s; want none of the first attempt's", len(second.Outputs), second.Progress)
			}
			if n := fs.removeCount(hash); n != tc.wantRemove || fs.has(hash) == (tc.wantRemove == 1) {
				t.Errorf("after the second claim: remove called %d times, present %v; want %d", n, fs.has(hash), tc.wantRemove)
			}
			_, err := st.GetAsset(ctx(t), account, old.Asset.ID)
			wantNotFound(t, "GetAsset of the first attempt's output", err)

			redo := mustAddOutput(t, st, fs, second, newOutput("9", hash))
			done, err := st.FinishJob(ctx(t), second.ID, second.Attempt, storage.JobSucceeded, nil)
			if err != nil {
				t.Fatalf("FinishJob: %v", err)
			}
			if len(done.Outputs) != 1 || done.Outputs[0].Asset.ID != redo.Asset.ID {
				t.Errorf("finished job outputs = %+v, want only the second attempt's %s", done.Outputs, redo.Asset.ID)
			}
			if !fs.has(hash) {
				t.Error("bytes of the second attempt's output are not present")
			}
		})
	}
}

func testMaxAttemptsFails(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	jobErr := json.RawMessage(`{"code": "worker_lost",  "message":"gone"}`)
	job := mustCreateJob(t, st, newJob(account, pool))
	for attempt := 1; attempt <= 2; attempt++ {
		claimed := mustClaim(t, st, fs, pool)
		if claimed.Attempt != attempt {
			t.Fatalf("claim %d has Attempt %d", attempt, claimed.Attempt)
		}
		at := micro(time.Now().Add(time.Hour))
		got, err := st.ReclaimExpired(ctx(t), at, 2, jobErr)
		if err != nil || len(got) != 1 {
			t.Fatalf("ReclaimExpired after attempt %d = %d jobs, %v; want 1", attempt, len(got), err)
		}
		wantStatus := map[int]string{1: storage.JobQueued, 2: storage.JobFailed}[attempt]
		if got[0].Status != wantStatus {
			t.Errorf("after attempt %d of 2: status %s, want %s", attempt, got[0].Status, wantStatus)
		}
		if attempt == 2 {
			if string(got[0].Error) != string(jobErr) || got[0].CompletedAt == nil || !got[0].CompletedAt.Equal(at) {
				t.Errorf("failed job: error %s completed %v; want %s and %v", got[0].Error, got[0].CompletedAt, jobErr, at)
			}
		} else if got[0].Error != nil || got[0].CompletedAt != nil {
			t.Errorf("requeued job: error %s completed %v; want neither", got[0].Error, got[0].CompletedAt)
		}
	}
	if got := mustGetJob(t, st, account, job.ID); got.Status != storage.JobFailed || got.Attempt != 2 || string(got.Error) != string(jobErr) {
		t.Errorf("GetJob of the failed job: status %s attempt %d error %s; want failed, 2, %s", got.Status, got.Attempt, got.Error, jobErr)
	}
	_, err := st.ClaimJob(ctx(t), pool, "w", time.Minute, 0, fs.remove)
	wantNotFound(t, "ClaimJob after the job failed", err)
	if got := reclaimAt(t, st, time.Now().Add(2*time.Hour), 2); len(got) != 0 {
		t.Errorf("a second ReclaimExpired changed %d jobs, want 0", len(got))
	}
}

func testReclaimCanceling(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	job := mustCreateJob(t, st, newJob(account, pool))
	mustClaim(t, st, fs, pool)
	if _, err := st.CancelJob(ctx(t), account, job.ID); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}
	at := micro(time.Now().Add(time.Hour))
	got := reclaimAt(t, st, at, 5)
	if len(got) != 1 || got[0].Status != storage.JobCanceled || got[0].CompletedAt == nil || !got[0].CompletedAt.Equal(at) {
		t.Fatalf("ReclaimExpired of a canceling job = %+v, want canceled at %v", got, at)
	}
	if got[0].Error != nil {
		t.Errorf("canceled job has error %s, want none", got[0].Error)
	}
}

func testExpireJobs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	now := micro(time.Now())
	past := now.Add(-time.Minute)
	mk := func(expires time.Time) storage.Job {
		j := newJob(account, pool)
		j.ExpiresAt = expires
		return mustCreateJob(t, st, j)
	}
	// Claimed first so that the queued ones below stay queued.
	running := mk(now.Add(time.Hour))
	mustClaim(t, st, fs, pool)
	done := mk(past)
	mustClaim(t, st, fs, pool)
	if _, err := st.FinishJob(ctx(t), done.ID, 1, storage.JobSucceeded, nil); err != nil {
		t.Fatalf("FinishJob: %v", err)
	}
	overdue := []storage.Job{mk(past), mk(past)}
	fresh := mk(now.Add(time.Hour))

	// Pass 1: only the retention deadline (the running bound is far back).
	longAgo := now.Add(-24 * time.Hour)
	var expired []string
	for i, want := range []int{1, 1, 0} {
		got, err := st.ExpireJobs(ctx(t), now, longAgo, 1)
		if err != nil || len(got) != want {
			t.Fatalf("ExpireJobs page %d (limit 1) = %d jobs, %v; want %d", i, len(got), err, want)
		}
		for _, j := range got {
			if j.Status != storage.JobExpired || j.CompletedAt == nil || !j.CompletedAt.Equal(now) {
				t.Errorf("expired job: status %s completed %v; want expired at %v", j.Status, j.CompletedAt, now)
			}
			expired = append(expired, j.ID)
		}
	}
	if len(expired) != 2 || expired[0] == expired[1] || !containsID(overdue, expired[0]) || !containsID(overdue, expired[1]) {
		t.Errorf("expired %v, want the two overdue queued jobs", expired)
	}
	// Pass 2: the running bound catches the running job, not the queued one.
	got, err := st.ExpireJobs(ctx(t), now, now.Add(time.Hour), 10)
	if err != nil || len(got) != 1 || got[0].ID != running.ID || got[0].Status != storage.JobExpired {
		t.Fatalf("ExpireJobs with the running bound = %+v, %v; want only the running job", got, err)
	}
	if _, err := st.RenewLease(ctx(t), running.ID, 1, time.Minute); !errors.Is(err, storage.ErrLeaseLost) {
		t.Errorf("RenewLease of an expired job: err = %v, want ErrLeaseLost", err)
	}
	wantStatus := map[string]string{done.ID: storage.JobSucceeded, fresh.ID: storage.JobQueued}
	for id, want := range wantStatus {
		if got := mustGetJob(t, st, account, id); got.Status != want {
			t.Errorf("job %s: status %s, want %s (untouched)", id, got.Status, want)
		}
	}
	if got, err := st.ExpireJobs(ctx(t), now, longAgo, 0); err != nil || len(got) != 0 {
		t.Errorf("ExpireJobs limit 0 = %d, %v; want nothing", len(got), err)
	}
}

func containsID(jobs []storage.Job, id string) bool {
	for _, j := range jobs {
		if j.ID == id {
			return true
		}
	}
	return false
}

func testAssetInUse(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	past := micro(time.Now().Add(-time.Minute))
	job := mustCreateJob(t, st, newJob(account, pool))
	claimed := mustClaim(t, st, fs, pool)
	keep := newOutput("1", hashOf("kept"))
	expiring := newOutput("2", hashOf("expiring"))
	expiring.Asset.ExpiresAt = &past // the asset's own retention has passed
	kept := mustAddOutput(t, st, fs, claimed, keep)
	reaped := mustAddOutput(t, st, fs, claimed, expiring)

	checkHeld(t, st, account, kept.Asset.ID)
	if n, err := st.DeleteExpiredAssets(ctx(t), time.Now(), 10, failRemove(t)); err != nil || n != 0 {
		t.Errorf("DeleteExpiredAssets = %d, %v; want an output of a live job kept", n, err)
	}
	if got := mustGetJob(t, st, account, job.ID); len(got.Outputs) != 2 {
		t.Errorf("job has %d outputs, want 2", len(got.Outputs))
	}

	// The running bound expires the job; its outputs are then released.
	if got, err := st.ExpireJobs(ctx(t), time.Now(), time.Now().Add(time.Hour), 10); err != nil || len(got) != 1 {
		t.Fatalf("ExpireJobs = %d jobs, %v; want the job", len(got), err)
	}
	if n, err := st.DeleteExpiredAssets(ctx(t), time.Now(), 10, fs.remove); err != nil || n != 1 {
		t.Errorf("DeleteExpiredAssets after the job expired = %d, %v; want 1", n, err)
	}
	if err := st.DeleteAsset(ctx(t), account, kept.Asset.ID, fs.remove); err != nil {
		t.Errorf("DeleteAsset of an expired job's output: %v", err)
	}
	for _, o := range []storage.Output{kept, reaped} {
		if n := fs.removeCount(o.Asset.Hash); n != 1 {
			t.Errorf("output %s: remove called %d times, want 1", o.NodeID, n)
		}
		_, err := st.GetAsset(ctx(t), account, o.Asset.ID)
		wantNotFound(t, "GetAsset of a released output", err)
	}
	if got := mustGetJob(t, st, account, job.ID); got.Status != storage.JobExpired || len(got.Outputs) != 0 {
		t.Errorf("expired job after its outputs went: status %s, %d outputs; want expired, 0", got.Status, len(got.Outputs))
	}

	// A finished job holds its outputs until its retention deadline, then
	// releases them although its status stays terminal.
	tests := []struct {
		name     string
		expires  time.Time
		wantHeld bool
	}{
		{"succeeded within retention", time.Now().Add(time.Hour), true},
		{"succeeded past retention", past, false},
	}
	for _, tc := range tests {
		j := newJob(account, pool)
		j.ExpiresAt = micro(tc.expires)
		mustCreateJob(t, st, j)
		c := mustClaim(t, st, fs, pool)
		o := mustAddOutput(t, st, fs, c, newOutput("7", hashOf(tc.name)))
		if _, err := st.FinishJob(ctx(t), c.ID, c.Attempt, storage.JobSucceeded, nil); err != nil {
			t.Fatalf("%s: FinishJob: %v", tc.name, err)
		}
		if tc.wantHeld {
			checkHeld(t, st, account, o.Asset.ID)
			continue
		}
		if err := st.DeleteAsset(ctx(t), account, o.Asset.ID, fs.remove); err != nil {
			t.Errorf("%s: DeleteAsset: %v", tc.name, err)
		}
		if got := mustGetJob(t, st, account, c.ID); got.Status != storage.JobSucceeded || len(got.Outputs) != 0 {
			t.Errorf("%s: job status %s with %d outputs; want succeeded, 0", tc.name, got.Status, len(got.Outputs))
		}
	}
}

// checkHeld asserts that the account's output asset id cannot be deleted
// (ErrInUse), that another account gets ErrNotFound for it, and that it survives.
func checkHeld(t *testing.T, st storage.Store, account, id string) {
	t.Helper()
	if err := st.DeleteAsset(ctx(t), account, id, failRemove(t)); !errors.Is(err, storage.ErrInUse) {
		t.Errorf("DeleteAsset of a held output: err = %v, want ErrInUse", err)
	}
	err := st.DeleteAsset(ctx(t), newID(), id, failRemove(t))
	wantNotFound(t, "DeleteAsset of another account's output", err)
	if _, err := st.GetAsset(ctx(t), account, id); err != nil {
		t.Errorf("held output after refused deletes: GetAsset: %v", err)
	}
}

// testReleaseJob: a released attempt's job is queued again at once, its
// stale attempt can no longer write, the last allowed attempt fails it with
// the given error, and a canceling job ends canceled.
func testReleaseJob(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	jobErr := json.RawMessage(`{"code":"worker_lost","message":"gone"}`)
	job := mustCreateJob(t, st, newJob(account, pool))

	first := mustClaim(t, st, fs, pool)
	got, err := st.ReleaseJob(ctx(t), job.ID, first.Attempt, 2, jobErr)
	if err != nil || got.Status != storage.JobQueued || got.Error != nil || got.CompletedAt != nil {
		t.Fatalf("release of attempt 1 of 2: %+v, %v; want queued without error", got, err)
	}
	_, err = st.ReleaseJob(ctx(t), job.ID, first.Attempt, 2, jobErr)
	wantErr(t, "releasing the same attempt twice", err, storage.ErrLeaseLost)
	wantErr(t, "SetProgress of the released attempt", st.SetProgress(ctx(t), job.ID, first.Attempt, json.RawMessage(`{}`)), storage.ErrLeaseLost)

	second := mustClaim(t, st, fs, pool)
	if second.ID != job.ID || second.Attempt != 2 {
		t.Fatalf("reclaim after release: %s attempt %d", second.ID, second.Attempt)
	}
	got, err = st.ReleaseJob(ctx(t), job.ID, second.Attempt, 2, jobErr)
	if err != nil || got.Status != storage.JobFailed || string(got.Error) != string(jobErr) || got.CompletedAt == nil {
		t.Fatalf("release of the last attempt: %+v, %v; want failed with %s", got, err, jobErr)
	}

	other := mustCreateJob(t, st, newJob(account, pool))
	claimed := mustClaim(t, st, fs, pool)
	if _, err := st.CancelJob(ctx(t), account, other.ID); err != nil {
		t.Fatal(err)
	}
	got, err = st.ReleaseJob(ctx(t), other.ID, claimed.Attempt, 3, jobErr)
	if err != nil || got.Status != storage.JobCanceled {
		t.Fatalf("release of a canceling job: %+v, %v; want canceled", got, err)
	}
}

// testExpireJobsManyAtOnce: a limit larger than a store's own unit of work
// (the embedded store commits 100 jobs a transaction) expires exactly that
// many, each once, oldest first, and the next call the rest.
func testExpireJobsManyAtOnce(t *testing.T, st storage.Store) {
	account, pool := newID(), newID()
	now := micro(time.Now())
	const total = 250
	for range total {
		j := newJob(account, pool)
		j.ExpiresAt = now.Add(-time.Minute)
		mustCreateJob(t, st, j)
	}
	seen := map[string]bool{}
	for i, want := range []int{150, total - 150, 0} {
		got, err := st.ExpireJobs(ctx(t), now, now.Add(-24*time.Hour), 150)
		if err != nil || len(got) != want {
			t.Fatalf("ExpireJobs call %d (limit 150) = %d jobs, %v; want %d", i+1, len(got), err, want)
		}
		for k, j := range got {
			if j.Status != storage.JobExpired || seen[j.ID] {
				t.Fatalf("call %d: job %s is %s (seen before: %v)", i+1, j.ID, j.Status, seen[j.ID])
			}
			seen[j.ID] = true
			if k > 0 && got[k-1].CreatedAt.After(j.CreatedAt) {
				t.Fatalf("call %d: jobs not oldest first at %d", i+1, k)
			}
		}
	}
	left, err := st.ListJobs(ctx(t), account, storage.JobQuery{Limit: 100, Statuses: []string{storage.JobQueued}})
	if err != nil || len(left) != 0 {
		t.Fatalf("queued jobs left after expiring all: %d, %v", len(left), err)
	}
}

// testTraceParentKept: the traceparent a job is created with (migration
// 0013) comes back with its claim, for jobs created alone and many at once
// (a backend may batch concurrent creates); a job created without one is
// claimed with none.
func testTraceParentKept(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	const n = 12
	want := map[string]string{}
	var wg sync.WaitGroup
	var mu sync.Mutex
	for i := range n {
		j := newJob(account, pool)
		if i > 0 { // the first has none
			j.TraceParent = fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)
		}
		want[j.ID] = j.TraceParent
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := st.CreateJob(ctx(t), j); err != nil {
				mu.Lock()
				defer mu.Unlock()
				t.Errorf("CreateJob: %v", err)
			}
		}()
	}
	wg.Wait()
	for range n {
		job := mustClaim(t, st, fs, pool)
		tp, ok := want[job.ID]
		if !ok {
			t.Fatalf("claimed an unknown job %s", job.ID)
		}
		if job.TraceParent != tp {
			t.Errorf("job %s claimed with TraceParent %q, want %q", job.ID, job.TraceParent, tp)
		}
	}
}
