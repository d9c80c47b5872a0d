package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// Conventions the jobs cases enforce beyond storage/jobs.go's doc comments:
//   - Workflow, Progress and Error come back byte for byte as written;
//   - a duplicate ID or idempotency key is refused with ErrDuplicate even
//     when the queue is also full;
//   - Outputs is empty (not absent) on GetJob/ClaimJob/FinishJob/CancelJob
//     for a job without outputs;
//   - a claim clears the earlier attempt's progress;
//   - FinishJob keeps the error object only for failed;
//   - ReclaimExpired and ExpireJobs set CompletedAt to the now they are given
//     and return jobs oldest first;
//   - a job requeued by ReclaimExpired keeps its place (CreatedAt) in the queue;
//   - ListJobs treats a Limit outside 1..100 as 100.

// jobGroups are the RunStore groups for storage.JobStore.
var jobGroups = []struct {
	name  string
	cases []storeCase
}{
	{"Jobs", jobCases},
	{"JobLeases", jobLeaseCases},
}

// jobCases cover creating, reading, listing and queueing jobs.
var jobCases = []storeCase{
	{"CreateGetRoundTrip", testJobRoundTrip},
	{"ListPagingAndFilter", testListJobs},
	{"ListEveryAccount", testListEveryAccount},
	{"ListWithOutputs", testListWithOutputs},
	{"CountJobs", testCountJobs},
	{"JobTimes", testJobTimes},
	{"QueueBoundConcurrent", testQueueBoundConcurrent},
	{"IdempotencyBackstop", testJobIdempotency},
	{"ClaimFIFOAndQueuePosition", testClaimFIFO},
	{"ConcurrentClaimsDistinct", testConcurrentJobClaims},
	{"CancelStateMachine", testCancelStateMachine},
}

// oddWorkflow is valid JSON whose spacing, key order and escapes a
// re-encoding store (jsonb, map round trips) would change.
const oddWorkflow = "{\"9\": {\"class_type\":\"KSampler\",  \"inputs\": {\"seed\": 42, \"a\":\"\\u00e9\\n\"}},\n \"1\":{}}"

// newJob returns a NewJob for account in pool expiring in a day.
func newJob(account, pool string) storage.NewJob {
	return storage.NewJob{
		ID: newID(), AccountID: account, Pool: pool,
		Workflow:  json.RawMessage(oddWorkflow),
		ExpiresAt: micro(time.Now().Add(24 * time.Hour)),
	}
}

// mustCreateJob creates j and fails the test on error.
func mustCreateJob(t *testing.T, st storage.Store, j storage.NewJob) storage.Job {
	t.Helper()
	job, err := st.CreateJob(ctx(t), j)
	if err != nil {
		t.Fatalf("CreateJob(%s): %v", j.ID, err)
	}
	return job
}

// mustClaim claims the pool's next job and fails the test on error.
func mustClaim(t *testing.T, st storage.Store, fs *fakeFS, pool string) storage.Job {
	t.Helper()
	job, err := st.ClaimJob(ctx(t), pool, "worker-"+pool[:8], time.Minute, 0, fs.remove)
	if err != nil {
		t.Fatalf("ClaimJob(%s): %v", pool, err)
	}
	return job
}

// mustGetJob reads the account's job and fails the test on error.
func mustGetJob(t *testing.T, st storage.Store, account, id string) storage.Job {
	t.Helper()
	job, err := st.GetJob(ctx(t), account, id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return job
}

// diffJob describes how got differs from want (outputs aside), or returns "".
func diffJob(got, want storage.Job) string {
	var d []string
	add := func(field string, g, w any) { d = append(d, fmt.Sprintf("%s = %v, want %v", field, g, w)) }
	if got.ID != want.ID || got.AccountID != want.AccountID || got.Pool != want.Pool {
		add("ID/AccountID/Pool", []string{got.ID, got.AccountID, got.Pool}, []string{want.ID, want.AccountID, want.Pool})
	}
	if got.DeploymentID != want.DeploymentID {
		add("DeploymentID", got.DeploymentID, want.DeploymentID)
	}
	if got.Status != want.Status {
		add("Status", got.Status, want.Status)
	}
	if got.Attempt != want.Attempt {
		add("Attempt", got.Attempt, want.Attempt)
	}
	for _, f := range []struct {
		name      string
		got, want []byte
	}{{"Workflow", got.Workflow, want.Workflow}, {"Progress", got.Progress, want.Progress}, {"Error", got.Error, want.Error}} {
		if string(f.got) != string(f.want) {
			add(f.name, string(f.got), string(f.want))
		}
	}
	if !got.CreatedAt.Equal(want.CreatedAt) {
		add("CreatedAt", got.CreatedAt, want.CreatedAt)
	}
	if !got.ExpiresAt.Equal(want.ExpiresAt) {
		add("ExpiresAt", got.ExpiresAt, want.ExpiresAt)
	}
	for _, f := range []struct {
		name      string
		got, want *time.Time
	}{{"StartedAt", got.StartedAt, want.StartedAt}, {"CompletedAt", got.CompletedAt, want.CompletedAt}} {
		if (f.got == nil) != (f.want == nil) || (f.got != nil && !f.got.Equal(*f.want)) {
			add(f.name, f.got, f.want)
		}
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprint(d)
}

func testJobRoundTrip(t *testing.T, st storage.Store) {
	account := newID()
	in := newJob(account, newID())
	before := time.Now().Add(-time.Minute)
	job := mustCreateJob(t, st, in)
	after := time.Now().Add(time.Minute)

	want := storage.Job{
		ID: in.ID, AccountID: account, Pool: in.Pool, Status: storage.JobQueued,
		Workflow: in.Workflow, CreatedAt: job.CreatedAt, ExpiresAt: in.ExpiresAt,
	}
	if d := diffJob(job, want); d != "" {
		t.Errorf("CreateJob returned %s", d)
	}
	if job.CreatedAt.Before(before) || job.CreatedAt.After(after) {
		t.Errorf("CreatedAt = %v, want about now", job.CreatedAt)
	}
	checkUTC(t, "CreatedAt", job.CreatedAt)
	checkUTC(t, "ExpiresAt", job.ExpiresAt)

	got := mustGetJob(t, st, account, in.ID)
	if d := diffJob(got, job); d != "" {
		t.Errorf("GetJob differs from CreateJob: %s", d)
	}
	if got.Outputs == nil || len(got.Outputs) != 0 {
		t.Errorf("Outputs = %#v, want empty and non-nil", got.Outputs)
	}

	misses := []struct{ name, account, id string }{
		{"other account", newID(), in.ID},
		{"unknown id", account, newID()},
		{"malformed id", account, "not-a-uuid"},
	}
	for _, m := range misses {
		_, err := st.GetJob(ctx(t), m.account, m.id)
		wantNotFound(t, "GetJob "+m.name, err)
	}
	dup := newJob(newID(), in.Pool)
	dup.ID = in.ID
	if _, err := st.CreateJob(ctx(t), dup); !errors.Is(err, storage.ErrDuplicate) {
		t.Errorf("CreateJob with a taken ID: err = %v, want ErrDuplicate", err)
	}
}

func testListJobs(t *testing.T, st storage.Store) {
	account, other, pool := newID(), newID(), newID()
	var all []storage.Job // oldest first
	for i := range 7 {
		all = append(all, mustCreateJob(t, st, newJob(account, pool)))
		if i == 2 {
			mustCreateJob(t, st, newJob(other, pool)) // another account's job in between
		}
		waitClockTick()
	}
	canceled := map[string]bool{}
	for _, i := range []int{1, 4} {
		if _, err := st.CancelJob(ctx(t), account, all[i].ID); err != nil {
			t.Fatalf("CancelJob: %v", err)
		}
		canceled[all[i].ID] = true
	}
	newestFirst := slices.Clone(all)
	slices.Reverse(newestFirst)
	ids := func(jobs []storage.Job) []string {
		out := make([]string, len(jobs))
		for i, j := range jobs {
			out[i] = j.ID
		}
		return out
	}
	filter := func(keep func(storage.Job) bool) []string {
		var out []storage.Job
		for _, j := range newestFirst {
			if keep(j) {
				out = append(out, j)
			}
		}
		return ids(out)
	}
	tests := []struct {
		name     string
		statuses []string
		want     []string
	}{
		{"all", nil, ids(newestFirst)},
		{"canceled", []string{storage.JobCanceled}, filter(func(j storage.Job) bool { return canceled[j.ID] })},
		{"queued", []string{storage.JobQueued}, filter(func(j storage.Job) bool { return !canceled[j.ID] })},
		{"queued or canceled", []string{storage.JobQueued, storage.JobCanceled}, ids(newestFirst)},
		{"running", []string{storage.JobRunning}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, limit := range []int{100, 3, 1} {
				var got []string
				q := storage.JobQuery{Statuses: tc.statuses, Limit: limit}
				for page := 0; ; page++ {
					jobs, err := st.ListJobs(ctx(t), account, q)
					if err != nil {
						t.Fatalf("ListJobs: %v", err)
					}
					if len(jobs) > limit || page > len(all) {
						t.Fatalf("limit %d: page of %d jobs (page %d)", limit, len(jobs), page)
					}
					got = append(got, ids(jobs)...)
					if len(jobs) < limit {
						break
					}
					last := jobs[len(jobs)-1]
					q.Before = &storage.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
				}
				if !slices.Equal(got, tc.want) {
					t.Errorf("limit %d: ListJobs ids = %v, want %v", limit, got, tc.want)
				}
			}
		})
	}
	jobs, err := st.ListJobs(ctx(t), account, storage.JobQuery{Limit: 1})
	if err != nil || len(jobs) != 1 {
		t.Fatalf("ListJobs limit 1 = %d jobs, %v", len(jobs), err)
	}
	if d := diffJob(jobs[0], mustGetJob(t, st, account, jobs[0].ID)); d != "" {
		t.Errorf("listed job differs from GetJob: %s", d)
	}
	if jobs, err := st.ListJobs(ctx(t), newID(), storage.JobQuery{Limit: 10}); err != nil || len(jobs) != 0 {
		t.Errorf("ListJobs of an account without jobs = %d jobs, %v; want none", len(jobs), err)
	}
}

// testQueueBoundConcurrent races 20 bounded creates (MaxQueued 5) in each of
// several pools at once: exactly 5 per pool pass (no refusal while there is
// room, and the bound holds under concurrency), and every refused job is
// absent. The serial steps after it check that the bound is exact
// when creates do not race.
func testQueueBoundConcurrent(t *testing.T, st storage.Store) {
	const bound, tries, pools = 5, 20, 8
	fs := newFakeFS()
	account := newID()
	mustCreateJob(t, st, newJob(account, newID())) // another pool's queue does not count
	type tally struct {
		ok, full    int
		rejectedIDs []string
	}
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		names   []string
		results = map[string]*tally{}
	)
	for range pools {
		pool := newID()
		names = append(names, pool)
		results[pool] = &tally{}
		for range tries {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := newJob(account, pool)
				j.MaxQueued = bound
				_, err := st.CreateJob(ctx(t), j)
				mu.Lock()
				defer mu.Unlock()
				r := results[pool]
				switch {
				case err == nil:
					r.ok++
				case errors.Is(err, storage.ErrQueueFull):
					r.full++
					r.rejectedIDs = append(r.rejectedIDs, j.ID)
				default:
					t.Errorf("CreateJob: %v, want nil or ErrQueueFull", err)
				}
			}()
		}
	}
	wg.Wait()
	for i, name := range names {
		r := results[name]
		if r.ok != bound || r.ok+r.full != tries {
			t.Errorf("pool %d: %d creates succeeded and %d were refused as full, want exactly %d of %d to succeed", i, r.ok, r.full, bound, tries)
		}
		if queued := countQueued(t, st, account, name); queued != r.ok {
			t.Errorf("pool %d: %d jobs queued, but %d creates succeeded", i, queued, r.ok)
		}
		for _, id := range r.rejectedIDs {
			_, err := st.GetJob(ctx(t), account, id)
			wantNotFound(t, "GetJob of a job refused as queue full", err)
		}
	}
	// Serially the bound is exact, and a claimed (running) job leaves the
	// queue, making room for one more.
	pool := newID()
	steps := []struct {
		name    string
		claim   bool
		wantErr error
		wantPos int
	}{{"1", false, nil, 1}, {"2", false, nil, 2}, {"3", false, nil, 3}, {"4", false, nil, 4}, {"5", false, nil, 5},
		{"over the bound", false, storage.ErrQueueFull, 0}, {"after a claim", true, nil, 5},
		{"full again", false, storage.ErrQueueFull, 0}}
	for _, s := range steps {
		if s.claim {
			mustClaim(t, st, fs, pool)
		}
		j := newJob(account, pool)
		j.MaxQueued = bound
		job, err := st.CreateJob(ctx(t), j)
		if !errors.Is(err, s.wantErr) {
			t.Errorf("serial create %s: CreateJob err = %v, want %v", s.name, err, s.wantErr)
		}
		if err == nil && job.QueuePosition != s.wantPos {
			t.Errorf("serial create %s: QueuePosition = %d, want %d", s.name, job.QueuePosition, s.wantPos)
		}
	}
	unbounded := newJob(account, pool)
	if job, err := st.CreateJob(ctx(t), unbounded); err != nil || job.QueuePosition != bound+1 {
		t.Errorf("CreateJob with MaxQueued 0 on a full pool: QueuePosition %d, %v; want %d, nil", job.QueuePosition, err, bound+1)
	}
}

// countQueued counts the account's queued jobs in pool.
func countQueued(t *testing.T, st storage.Store, account, pool string) int {
	t.Helper()
	jobs, err := st.ListJobs(ctx(t), account, storage.JobQuery{Statuses: []string{storage.JobQueued}, Limit: 100})
	if err != nil {
		t.Fatalf("ListJobs: %v", err)
	}
	n := 0
	for _, j := range jobs {
		if j.Pool == pool {
			n++
		}
	}
	return n
}

func testJobIdempotency(t *testing.T, st storage.Store) {
	accountA, accountB, pool := newID(), newID(), newID()
	key := "idem-" + newID()
	first := newJob(accountA, pool)
	first.IdempotencyKey = key
	mustCreateJob(t, st, first)
	tests := []struct {
		name      string
		account   string
		key       string
		takenID   bool // reuse first's ID
		maxQueued int
		wantErr   error
	}{
		{"same account, same key", accountA, key, false, 0, storage.ErrDuplicate},
		{"same key while the queue is full", accountA, key, false, 1, storage.ErrDuplicate},
		{"taken ID while the queue is full", accountB, "", true, 1, storage.ErrDuplicate},
		{"free key while the queue is full", accountA, "idem-" + newID(), false, 1, storage.ErrQueueFull},
		{"other account, same key", accountB, key, false, 0, nil},
		{"same account, other key", accountA, "idem-" + newID(), false, 0, nil},
		{"no key", accountA, "", false, 0, nil},
		{"no key again", accountA, "", false, 0, nil},
	}
	for _, tc := range tests {
		j := newJob(tc.account, pool)
		j.IdempotencyKey, j.MaxQueued = tc.key, tc.maxQueued
		if tc.takenID {
			j.ID = first.ID
		}
		_, err := st.CreateJob(ctx(t), j)
		if !errors.Is(err, tc.wantErr) {
			t.Errorf("%s: CreateJob err = %v, want %v", tc.name, err, tc.wantErr)
		}
		if tc.wantErr != nil && !tc.takenID {
			_, err := st.GetJob(ctx(t), tc.account, j.ID)
			wantNotFound(t, tc.name+": GetJob of the refused job", err)
		}
	}
}

// testListEveryAccount: ListJobs with no account lists every account's
// jobs newest first, paged and filtered like one account's.
func testListEveryAccount(t *testing.T, st storage.Store) {
	pool := newID()
	var want []string // newest first
	for i := range 5 {
		j := mustCreateJob(t, st, newJob([]string{"acct-a", "acct-b"}[i%2], pool))
		want = append([]string{j.ID}, want...)
		waitClockTick()
	}
	if _, err := st.CancelJob(ctx(t), "acct-b", want[1]); err != nil {
		t.Fatal(err)
	}
	var got []string
	q := storage.JobQuery{Limit: 2}
	for {
		jobs, err := st.ListJobs(ctx(t), "", q)
		if err != nil {
			t.Fatalf("ListJobs: %v", err)
		}
		for _, j := range jobs {
			got = append(got, j.ID)
		}
		if len(jobs) < 2 {
			break
		}
		last := jobs[len(jobs)-1]
		q.Before = &storage.JobCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	if !slices.Equal(got, want) {
		t.Errorf("every account's jobs = %v, want %v", got, want)
	}
	canceled, err := st.ListJobs(ctx(t), "", storage.JobQuery{Statuses: []string{storage.JobCanceled}, Limit: 10})
	if err != nil || len(canceled) != 1 || canceled[0].ID != want[1] || canceled[0].AccountID != "acct-b" {
		t.Errorf("every account's canceled jobs = %v, %v; want %s of acct-b", canceled, err, want[1])
	}
}

// testCountJobs: CountJobs follows jobs into and out of the queue and
// running, per pool.
func testCountJobs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a, b := newID(), newID()
	check := func(when string, want map[string]storage.PoolCounts) {
		t.Helper()
		got, err := st.CountJobs(ctx(t))
		if err != nil {
			t.Fatalf("%s: CountJobs: %v", when, err)
		}
		for pool, w := range want {
			if got[pool] != w {
				t.Errorf("%s: pool %s counts %+v, want %+v", when, pool[:8], got[pool], w)
			}
		}
	}
	check("empty", map[string]storage.PoolCounts{a: {}, b: {}})
	var queued []storage.Job
	for range 3 {
		queued = append(queued, mustCreateJob(t, st, newJob("acct", a)))
	}
	mustCreateJob(t, st, newJob("acct", b))
	check("after creates", map[string]storage.PoolCounts{a: {Queued: 3}, b: {Queued: 1}})
	running := mustClaim(t, st, fs, a)
	check("after a claim", map[string]storage.PoolCounts{a: {Queued: 2, Running: 1}, b: {Queued: 1}})
	if _, err := st.CancelJob(ctx(t), "acct", running.ID); err != nil { // running → canceling
		t.Fatal(err)
	}
	if _, err := st.CancelJob(ctx(t), "acct", queued[2].ID); err != nil { // queued → canceled
		t.Fatal(err)
	}
	check("after cancels", map[string]storage.PoolCounts{a: {Queued: 1, Running: 1}, b: {Queued: 1}})
	if _, err := st.FinishJob(ctx(t), running.ID, running.Attempt, storage.JobCanceled, nil); err != nil {
		t.Fatal(err)
	}
	check("after the end", map[string]storage.PoolCounts{a: {Queued: 1}, b: {Queued: 1}})
}

// testJobTimes: a ScaleStore's JobTimes averages, per pool, the run time
// of the succeeded jobs among the recent newest jobs only.
func testJobTimes(t *testing.T, st storage.Store) {
	ss, ok := st.(storage.ScaleStore)
	if !ok {
		t.Skip("the store keeps no scale state")
	}
	fs := newFakeFS()
	a, b := newID(), newID()
	var longest time.Duration
	run := func(status string) {
		t.Helper()
		mustCreateJob(t, st, newJob("acct", a))
		start := time.Now()
		j := mustClaim(t, st, fs, a)
		time.Sleep(2 * time.Millisecond) // a run time above the stores' microseconds
		if _, err := st.FinishJob(ctx(t), j.ID, j.Attempt, status, json.RawMessage(`{"code":"x"}`)); err != nil {
			t.Fatal(err)
		}
		longest = max(longest, time.Since(start))
	}
	check := func(when string, recent int, want map[string]int) {
		t.Helper()
		got, err := ss.JobTimes(ctx(t), recent)
		if err != nil {
			t.Fatalf("%s: JobTimes: %v", when, err)
		}
		for _, pool := range []string{a, b} {
			g := got[pool]
			if g.Samples != want[pool] {
				t.Errorf("%s: pool %s: %d samples, want %d", when, pool[:8], g.Samples, want[pool])
			}
			// At least half the 2 ms each job slept: a store may keep its
			// timestamps to the millisecond (embedded: 1.97 ms seen).
			if g.Samples > 0 && (g.Mean < time.Millisecond || g.Mean > longest+5*time.Millisecond) {
				t.Errorf("%s: pool %s: mean %v, want within [1ms, %v]", when, pool[:8], g.Mean, longest+5*time.Millisecond)
			}
		}
	}
	check("empty", 100, nil)
	for range 3 {
		run(storage.JobSucceeded)
	}
	run(storage.JobFailed)                  // not a sample
	mustCreateJob(t, st, newJob("acct", b)) // queued: not a sample
	check("after runs", 100, map[string]int{a: 3})
	mustCreateJob(t, st, newJob("acct", b))
	check("the newest three: two queued, the failed", 3, nil)
	check("the newest four: and a succeeded", 4, map[string]int{a: 1})
}

// testListWithOutputs: listed jobs carry their outputs, in commit order,
// as GetJob has them; a job without outputs lists an empty slice.
func testListWithOutputs(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	account, pool := newID(), newID()
	mustCreateJob(t, st, newJob(account, pool))
	ran := mustClaim(t, st, fs, pool)
	preview := newOutput("9", hashOf("list-out-1"))
	preview.Folder = "temp"
	mustAddOutput(t, st, fs, ran, preview)
	mustAddOutput(t, st, fs, ran, newOutput("3", hashOf("list-out-2")))
	if _, err := st.FinishJob(ctx(t), ran.ID, ran.Attempt, storage.JobSucceeded, nil); err != nil {
		t.Fatal(err)
	}
	waitClockTick()
	idle := mustCreateJob(t, st, newJob(account, pool))
	for _, who := range []string{account, ""} {
		jobs, err := st.ListJobs(ctx(t), who, storage.JobQuery{Limit: 10})
		if err != nil || len(jobs) != 2 || jobs[0].ID != idle.ID || jobs[1].ID != ran.ID {
			t.Fatalf("ListJobs(%q) = %v, %v", who, jobs, err)
		}
		if jobs[0].Outputs == nil || len(jobs[0].Outputs) != 0 {
			t.Errorf("ListJobs(%q): a job without outputs lists %#v, want an empty slice", who, jobs[0].Outputs)
		}
		want := mustGetJob(t, st, account, ran.ID).Outputs
		got := jobs[1].Outputs
		if len(got) != 2 || len(want) != 2 {
			t.Fatalf("ListJobs(%q): outputs %v, GetJob's %v", who, got, want)
		}
		for i := range got {
			if got[i].NodeID != want[i].NodeID || got[i].Name != want[i].Name || got[i].Type != want[i].Type || got[i].Folder != want[i].Folder ||
				got[i].Asset.ID != want[i].Asset.ID || got[i].Asset.Hash != want[i].Asset.Hash {
				t.Errorf("ListJobs(%q): output %d = %+v, GetJob's %+v", who, i, got[i], want[i])
			}
		}
	}
}
