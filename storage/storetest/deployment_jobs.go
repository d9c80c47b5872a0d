package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// deploymentJobCases cover what deployments add to jobs and assets: the
// deployment id they carry, a deployment's listing, stopping its jobs, run
// logs and the deletion of jobs past retention.
var deploymentJobCases = []storeCase{
	{"JobsAndAssetsCarryDeployment", testDeploymentCarried},
	{"ListByDeployment", testListByDeployment},
	{"CancelDeploymentJobs", testCancelDeploymentJobs},
	{"RunLogRoundTrip", testJobLogRoundTrip},
	{"RunLogNeedsLease", testJobLogLease},
	{"RunLogRefusesBadText", testJobLogBadText},
	{"DeleteExpiredJobs", testDeleteExpiredJobs},
}

func testDeploymentCarried(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool, dep := newID(), newID(), depID()
	in := newJob(account, pool)
	in.DeploymentID = dep
	job := mustCreateJob(t, st, in)
	if job.DeploymentID != dep {
		t.Errorf("CreateJob DeploymentID = %q, want %q", job.DeploymentID, dep)
	}
	if got := mustGetJob(t, st, account, in.ID); got.DeploymentID != dep {
		t.Errorf("GetJob DeploymentID = %q, want %q", got.DeploymentID, dep)
	}
	plain := mustCreateJob(t, st, newJob(account, pool))
	if plain.DeploymentID != "" {
		t.Errorf("a job without a deployment has DeploymentID %q", plain.DeploymentID)
	}

	claimed := mustClaim(t, st, fs, pool)
	if claimed.ID != in.ID || claimed.DeploymentID != dep {
		t.Fatalf("claimed %s (deployment %q), want %s of %s", claimed.ID, claimed.DeploymentID, in.ID, dep)
	}
	out := newOutput("9", hashOf("out"))
	out.Asset.DeploymentID = "ignored-the-job-decides"
	o := mustAddOutput(t, st, fs, claimed, out)
	if o.Asset.DeploymentID != dep {
		t.Errorf("output asset DeploymentID = %q, want the job's %q", o.Asset.DeploymentID, dep)
	}
	if got := mustGetJob(t, st, account, in.ID); len(got.Outputs) != 1 || got.Outputs[0].Asset.DeploymentID != dep {
		t.Errorf("GetJob outputs = %+v, want one of deployment %s", got.Outputs, dep)
	}

	up := newAsset(account, hashOf("upload"))
	up.JobID, up.DeploymentID = "", dep
	c := mustCreate(t, st, fs, up)
	if c.Asset.DeploymentID != dep {
		t.Errorf("CreateAsset DeploymentID = %q, want %q", c.Asset.DeploymentID, dep)
	}
	got, err := st.GetAsset(ctx(t), account, up.ID)
	if err != nil || got.DeploymentID != dep {
		t.Errorf("GetAsset = %+v, %v; want deployment %s", got, err, dep)
	}
}

func testListByDeployment(t *testing.T, st storage.Store) {
	account, pool := newID(), newID()
	a, b := depID(), depID()
	want := map[string][]string{}
	for i := range 5 {
		for _, dep := range []string{a, b, ""} {
			j := newJob(account, pool)
			j.DeploymentID = dep
			mustCreateJob(t, st, j)
			want[dep] = append([]string{j.ID}, want[dep]...) // newest first
		}
		if i == 2 {
			waitClockTick()
		}
	}
	for _, dep := range []string{a, b} {
		var got []string
		q := storage.JobQuery{Limit: 2, DeploymentID: dep}
		for {
			page, err := st.ListJobs(ctx(t), account, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range page {
				if j.DeploymentID != dep {
					t.Errorf("ListJobs(%s) returned a job of %q", dep, j.DeploymentID)
				}
				got = append(got, j.ID)
			}
			if len(page) < q.Limit {
				break
			}
			last := page[len(page)-1]
			q.Before = &storage.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		}
		if len(got) != 5 {
			t.Errorf("ListJobs(%s) paged through %d jobs, want 5", dep, len(got))
		}
	}
	all, err := st.ListJobs(ctx(t), account, storage.JobQuery{Limit: 100})
	if err != nil || len(all) != 15 {
		t.Errorf("ListJobs without a deployment = %d jobs, %v; want all 15", len(all), err)
	}
	other, err := st.ListJobs(ctx(t), newID(), storage.JobQuery{Limit: 100, DeploymentID: a})
	if err != nil || len(other) != 0 {
		t.Errorf("another account listing deployment %s got %d jobs, %v", a, len(other), err)
	}
}

func testCancelDeploymentJobs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool, dep := newID(), newID(), depID()
	create := func(d string) storage.Job {
		j := newJob(account, pool)
		j.DeploymentID = d
		return mustCreateJob(t, st, j)
	}
	running := create(dep)
	done := create(dep)
	queued := create(dep)
	elsewhere := create(depID())
	plain := create("")
	if c := mustClaim(t, st, fs, pool); c.ID != running.ID {
		t.Fatalf("claimed %s, want %s", c.ID, running.ID)
	}
	finished := mustClaim(t, st, fs, pool)
	if finished.ID != done.ID {
		t.Fatalf("claimed %s, want %s", finished.ID, done.ID)
	}
	if _, err := st.FinishJob(ctx(t), done.ID, finished.Attempt, storage.JobSucceeded, nil); err != nil {
		t.Fatal(err)
	}

	changed, err := st.CancelDeploymentJobs(ctx(t), dep)
	if err != nil {
		t.Fatalf("CancelDeploymentJobs: %v", err)
	}
	if len(changed) != 2 || changed[0].ID != running.ID || changed[1].ID != queued.ID {
		t.Fatalf("changed = %v, want [running, queued] oldest first", jobIDs(changed))
	}
	if changed[0].Status != storage.JobCanceling || changed[1].Status != storage.JobCanceled || changed[1].CompletedAt == nil {
		t.Errorf("changed statuses = %s, %s (completed %v)", changed[0].Status, changed[1].Status, changed[1].CompletedAt)
	}
	for id, want := range map[string]string{running.ID: storage.JobCanceling, queued.ID: storage.JobCanceled,
		done.ID: storage.JobSucceeded, elsewhere.ID: storage.JobQueued, plain.ID: storage.JobQueued} {
		if got := mustGetJob(t, st, account, id); got.Status != want {
			t.Errorf("job %s is %s, want %s", id, got.Status, want)
		}
	}
	again, err := st.CancelDeploymentJobs(ctx(t), dep)
	if err != nil || len(again) != 0 {
		t.Errorf("a second CancelDeploymentJobs changed %v, %v; want nothing", jobIDs(again), err)
	}
	// The canceling job ends through the ordinary state machine.
	if got, err := st.RenewLease(ctx(t), running.ID, 1, time.Minute); err != nil || got != storage.JobCanceling {
		t.Errorf("RenewLease = %q, %v; want canceling", got, err)
	}
	if j, err := st.FinishJob(ctx(t), running.ID, 1, storage.JobCanceled, nil); err != nil || j.Status != storage.JobCanceled {
		t.Errorf("FinishJob = %s, %v", j.Status, err)
	}
}

func jobIDs(jobs []storage.Job) []string {
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// runningDeploymentJob creates and claims a job of a deployment.
func runningDeploymentJob(t *testing.T, st storage.Store, fs *fakeFS) storage.Job {
	t.Helper()
	j := newJob(newID(), newID())
	j.DeploymentID = depID()
	mustCreateJob(t, st, j)
	return mustClaim(t, st, fs, j.Pool)
}

func testJobLogRoundTrip(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	job := runningDeploymentJob(t, st, fs)
	if _, ok, err := st.GetJobLog(ctx(t), job.AccountID, job.ID); err != nil || ok {
		t.Fatalf("GetJobLog before any = ok %v, %v; want none", ok, err)
	}
	first := storage.JobLog{Text: "got prompt\n", CapturedAt: micro(time.Now())}
	if err := st.SetJobLog(ctx(t), job.ID, job.Attempt, first); err != nil {
		t.Fatalf("SetJobLog: %v", err)
	}
	head := "got prompt\n!!! Exception during processing !!! ünïcode ✓ \"quotes\" \\ \t\r\n"
	text := head + strings.Repeat("x", storage.MaxJobLogBytes-len(head))
	second := storage.JobLog{Text: text, Truncated: true, CapturedAt: micro(time.Now().Add(time.Second))}
	if err := st.SetJobLog(ctx(t), job.ID, job.Attempt, second); err != nil {
		t.Fatalf("SetJobLog (replace, at the cap): %v", err)
	}
	if _, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobFailed, []byte(`{"code":"x"}`)); err != nil {
		t.Fatal(err)
	}
	got, ok, err := st.GetJobLog(ctx(t), job.AccountID, job.ID)
	if err != nil || !ok {
		t.Fatalf("GetJobLog = ok %v, %v", ok, err)
	}
	if got.Text != second.Text || !got.Truncated || !got.CapturedAt.Equal(second.CapturedAt) {
		t.Errorf("GetJobLog = %d bytes, truncated %v, at %v; want the second log", len(got.Text), got.Truncated, got.CapturedAt)
	}
	checkUTC(t, "CapturedAt", got.CapturedAt)
	_, _, err = st.GetJobLog(ctx(t), newID(), job.ID)
	wantNotFound(t, "GetJobLog of another account", err)
	_, _, err = st.GetJobLog(ctx(t), job.AccountID, newID())
	wantNotFound(t, "GetJobLog unknown", err)
	_, _, err = st.GetJobLog(ctx(t), job.AccountID, "not-a-uuid")
	wantNotFound(t, "GetJobLog malformed", err)
}

func testJobLogLease(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	job := runningDeploymentJob(t, st, fs)
	l := storage.JobLog{Text: "late", CapturedAt: micro(time.Now())}
	wantErr(t, "SetJobLog of a stale attempt", st.SetJobLog(ctx(t), job.ID, job.Attempt+1, l), storage.ErrLeaseLost)
	wantErr(t, "SetJobLog of an unknown job", st.SetJobLog(ctx(t), newID(), 1, l), storage.ErrLeaseLost)
	if _, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobSucceeded, nil); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "SetJobLog after the attempt ended", st.SetJobLog(ctx(t), job.ID, job.Attempt, l), storage.ErrLeaseLost)
	if _, ok, err := st.GetJobLog(ctx(t), job.AccountID, job.ID); err != nil || ok {
		t.Errorf("a refused SetJobLog stored a log: ok %v, %v", ok, err)
	}
}

func testJobLogBadText(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	job := runningDeploymentJob(t, st, fs)
	for name, text := range map[string]string{
		"invalid UTF-8": "a\xff\xfeb",
		"NUL byte":      "a\x00b",
		"over the cap":  strings.Repeat("x", storage.MaxJobLogBytes+1),
	} {
		err := st.SetJobLog(ctx(t), job.ID, job.Attempt, storage.JobLog{Text: text, CapturedAt: micro(time.Now())})
		if err == nil || errors.Is(err, storage.ErrLeaseLost) {
			t.Errorf("SetJobLog(%s): err = %v, want a refusal", name, err)
		}
	}
	if _, ok, err := st.GetJobLog(ctx(t), job.AccountID, job.ID); err != nil || ok {
		t.Errorf("a refused log was stored: ok %v, %v", ok, err)
	}
}

func testDeleteExpiredJobs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	now := time.Now()
	make := func(expires time.Time) storage.Job {
		j := newJob(account, pool)
		j.ExpiresAt = micro(expires)
		j.DeploymentID = depID()
		return mustCreateJob(t, st, j)
	}
	// Past its deadline and finished, with an output and a run log: goes.
	old := make(now.Add(-time.Hour))
	claimed := mustClaim(t, st, fs, pool)
	if claimed.ID != old.ID {
		t.Fatalf("claimed %s, want %s", claimed.ID, old.ID)
	}
	out := mustAddOutput(t, st, fs, claimed, newOutput("3", hashOf("purged")))
	if err := st.SetJobLog(ctx(t), old.ID, claimed.Attempt, storage.JobLog{Text: "bye", CapturedAt: micro(now)}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishJob(ctx(t), old.ID, claimed.Attempt, storage.JobSucceeded, nil); err != nil {
		t.Fatal(err)
	}
	// Past its deadline but still queued: stays (the reaper expires it first).
	open := make(now.Add(-time.Hour))
	// Finished but within retention: stays.
	fresh := make(now.Add(time.Hour))
	if _, err := st.CancelJob(ctx(t), account, fresh.ID); err != nil {
		t.Fatal(err)
	}
	// Two more past their deadline, canceled: the limit leaves one.
	var extra []storage.Job
	for range 2 {
		j := make(now.Add(-30 * time.Minute))
		if _, err := st.CancelJob(ctx(t), account, j.ID); err != nil {
			t.Fatal(err)
		}
		extra = append(extra, j)
	}

	n, err := st.DeleteExpiredJobs(ctx(t), now, 2)
	if err != nil || n != 2 {
		t.Fatalf("DeleteExpiredJobs(limit 2) = %d, %v; want 2", n, err)
	}
	_, err = st.GetJob(ctx(t), account, old.ID)
	wantNotFound(t, "GetJob of a deleted job", err)
	_, _, err = st.GetJobLog(ctx(t), account, old.ID)
	wantNotFound(t, "GetJobLog of a deleted job", err)
	if n, err := st.DeleteExpiredJobs(ctx(t), now, 10); err != nil || n != 1 {
		t.Errorf("second DeleteExpiredJobs = %d, %v; want the 1 left", n, err)
	}
	for _, j := range extra {
		_, err := st.GetJob(ctx(t), account, j.ID)
		wantNotFound(t, "GetJob of a deleted canceled job", err)
	}
	for _, keep := range []storage.Job{open, fresh} {
		mustGetJob(t, st, account, keep.ID)
	}
	// The output asset follows its own retention; its job no longer holds it.
	if _, err := st.GetAsset(ctx(t), account, out.Asset.ID); err != nil {
		t.Errorf("GetAsset of the deleted job's output: %v (assets follow their own retention)", err)
	}
	if err := st.DeleteAsset(ctx(t), account, out.Asset.ID, fs.remove); err != nil {
		t.Errorf("DeleteAsset of the deleted job's output: %v", err)
	}
	if n, err := st.DeleteExpiredJobs(ctx(t), now, 0); err != nil || n != 0 {
		t.Errorf("DeleteExpiredJobs(limit 0) = %d, %v", n, err)
	}
}
