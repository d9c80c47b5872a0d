package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/blob"
)

// faultScenarios are the write methods under the fault matrix: every write
// that creates, removes or moves something a client was told about, or
// that touches bytes.
var faultScenarios = []faultScenario{
	{"CreateAsset/upload", faultCreateAsset(false, false)},
	{"CreateAsset/declared-hash", faultCreateAsset(true, false)},
	{"CreateAsset/dedup", faultCreateAsset(false, true)},
	{"CreateAsset/from-hash", faultFromHash},
	{"DeleteAsset/last-reference", faultDeleteAsset(false)},
	{"DeleteAsset/shared-bytes", faultDeleteAsset(true)},
	{"DeleteExpiredAssets", faultRetention},
	{"RemoveUnreferencedBlobs", faultUnreferencedSweep},
	{"RemoveOrphanBlobs", faultOrphanSweep},
	{"CreateJob", faultCreateJob(false)},
	{"CreateJob/priced", faultCreateJob(true)},
	{"CreateJob/batch", faultCreateJobBatch},
	{"ClaimJob/replacing-outputs", faultClaimJob},
	{"AddOutput", faultAddOutput},
	{"FinishJob/priced", faultFinishJob},
	{"ReleaseJob", faultReleaseJob},
	{"CancelJob/running", faultCancelJob(false)},
	{"CancelJob/queued-priced", faultCancelJob(true)},
	{"GrantCredits", faultGrantCredits},
	{"ReserveCallCredits", faultReserveCallCredits},
	{"SettleCallCredits", faultSettleCallCredits},
	{"CreateRouterCall", faultCreateRouterCall},
	{"UpdateRouterCall", faultUpdateRouterCall},
	{"RecordRouterCalls", faultRecordRouterCalls},
	{"CreateDeployment", faultCreateDeployment},
	{"SetDeploymentState", faultSetDeploymentState},
	{"DeleteDeployment", faultDeleteDeployment},
}

// mustAsset creates an asset of the run's account over hash (at a fresh
// key when keyed, else at its address) and tracks it.
func (e *faultEnv) mustAsset(t *testing.T, hash string, keyed bool) storage.Asset {
	t.Helper()
	a := newAsset(e.account, hash)
	a.JobID = ""
	pub := e.fs.publish(hash)
	if keyed {
		pub, _ = e.fs.keyed(hash)
	}
	c, err := e.st.CreateAsset(ctx(t), a, pub)
	if err != nil {
		t.Fatalf("prepare: CreateAsset: %v", err)
	}
	e.track(c.Asset)
	return c.Asset
}

// exists reports whether the run's account has asset id, failing t on an
// error other than not found.
func (e *faultEnv) exists(t *testing.T, account, id string) bool {
	t.Helper()
	_, err := e.st.GetAsset(ctx(t), account, id)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetAsset(%s): %v", id, err)
	}
	return err == nil
}

// balance is the account's balance, checked against the sum of its ledger.
func (e *faultEnv) balance(t *testing.T, account string) int64 {
	t.Helper()
	b, err := e.st.CreditBalance(ctx(t), account)
	if err != nil {
		t.Fatalf("CreditBalance: %v", err)
	}
	entries, err := e.st.CreditLedger(ctx(t), account, time.Time{})
	if err != nil {
		t.Fatalf("CreditLedger: %v", err)
	}
	var sum int64
	for _, en := range entries {
		sum += en.Amount
	}
	if sum != b {
		t.Errorf("balance %d is not the sum of the ledger's %d entries (%d)", b, len(entries), sum)
	}
	return b
}

// job reads the run's job.
func (e *faultEnv) job(t *testing.T, id string) storage.Job {
	t.Helper()
	j, err := e.st.GetJob(ctx(t), e.account, id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

// oneOf reports which of two consistent states holds (true for the
// first), failing t when neither does.
func oneOf(t *testing.T, what string, there, absent bool) bool {
	t.Helper()
	if there == absent {
		t.Errorf("%s: half done (neither wholly there nor wholly absent)", what)
	}
	return there
}

func faultCreateAsset(declared, dedup bool) func(t *testing.T, e *faultEnv) faultWrite {
	return func(t *testing.T, e *faultEnv) faultWrite {
		hash := hashOf("create")
		if dedup {
			e.mustAsset(t, hash, true)
		}
		a := newAsset(e.account, hash)
		a.IdempotencyKey = newID()
		pub := e.fs.publish(hash)
		if !declared {
			pub, _ = e.fs.keyed(hash)
		}
		e.track(storage.Asset{ID: a.ID, AccountID: a.AccountID})
		return faultWrite{
			do: func(ctx context.Context) error {
				_, err := e.st.CreateAsset(ctx, a, pub)
				return err
			},
			effect:  func(t *testing.T) bool { return e.exists(t, a.AccountID, a.ID) },
			creates: true,
		}
	}
}

func faultFromHash(t *testing.T, e *faultEnv) faultWrite {
	hash := hashOf("from-hash")
	e.mustAsset(t, hash, true)
	a := newAsset(e.account, hash)
	a.IdempotencyKey = newID()
	e.track(storage.Asset{ID: a.ID, AccountID: a.AccountID})
	present := storage.PublishFunc(func(held *blob.Ref) (blob.Ref, error) {
		if held == nil || !e.fs.hasObject(*held) {
			return blob.Ref{}, fmt.Errorf("blob %s is not available", hash)
		}
		return *held, nil
	})
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.CreateAsset(ctx, a, present)
			return err
		},
		effect:  func(t *testing.T) bool { return e.exists(t, a.AccountID, a.ID) },
		creates: true,
	}
}

func faultDeleteAsset(shared bool) func(t *testing.T, e *faultEnv) faultWrite {
	return func(t *testing.T, e *faultEnv) faultWrite {
		hash := hashOf("delete")
		if shared {
			e.mustAsset(t, hash, true)
		}
		a := e.mustAsset(t, hash, !shared)
		return faultWrite{
			do: func(ctx context.Context) error {
				return e.st.DeleteAsset(ctx, a.AccountID, a.ID, e.fs.remove)
			},
			effect: func(t *testing.T) bool { return !e.exists(t, a.AccountID, a.ID) },
		}
	}
}

// faultRetention: two expired assets, one the only record of its bytes and
// one sharing its bytes with a live asset, go in one sweep.
func faultRetention(t *testing.T, e *faultEnv) faultWrite {
	past := micro(time.Now().Add(-time.Hour))
	expired := func(hash string, keyed bool) storage.Asset {
		a := newAsset(e.account, hash)
		a.JobID, a.ExpiresAt = "", &past
		pub := e.fs.publish(hash)
		if keyed {
			pub, _ = e.fs.keyed(hash)
		}
		c, err := e.st.CreateAsset(ctx(t), a, pub)
		if err != nil {
			t.Fatalf("prepare: CreateAsset: %v", err)
		}
		e.track(c.Asset)
		return c.Asset
	}
	sole := expired(hashOf("retention-sole"), true)
	shared := hashOf("retention-shared")
	e.mustAsset(t, shared, false)
	other := expired(shared, false)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.DeleteExpiredAssets(ctx, time.Now(), 1000, e.fs.remove)
			return err
		},
		partial: true,
		effect: func(t *testing.T) bool {
			return !e.exists(t, sole.AccountID, sole.ID) && !e.exists(t, other.AccountID, other.ID)
		},
	}
}

// faultUnreferencedSweep: the sweep that removes the bytes a delete could
// not remove after its commit.
func faultUnreferencedSweep(t *testing.T, e *faultEnv) faultWrite {
	hash := hashOf("unreferenced")
	a := e.mustAsset(t, hash, true)
	if err := e.st.DeleteAsset(ctx(t), a.AccountID, a.ID, func(blob.Ref) error {
		return errors.New("the blob store is down")
	}); err != nil {
		t.Fatalf("prepare: DeleteAsset: %v", err)
	}
	e.mustAsset(t, hashOf("unreferenced-live"), true)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.RemoveUnreferencedBlobs(ctx, 1000, e.fs.remove)
			return err
		},
		// The bytes go before the row: a removal whose commit fails has
		// still removed them (the row, left, names nothing and goes on the
		// next pass), so the answer does not say whether they are gone.
		partial: true,
		effect:  func(t *testing.T) bool { return !e.fs.has(hash) },
	}
}

// faultOrphanSweep: objects no record names (one at its address, one at a
// key) among objects that live records name.
func faultOrphanSweep(t *testing.T, e *faultEnv) faultWrite {
	e.mustAsset(t, hashOf("orphans-live-key"), true)
	e.mustAsset(t, hashOf("orphans-live-address"), false)
	atAddress := blob.Ref{Hash: hashOf("orphan-address")}
	atKey := blob.Ref{Hash: hashOf("orphan-key"), Key: "blobs/orphan-" + newID()}
	e.fs.plant(atAddress)
	e.fs.plant(atKey)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.RemoveOrphanBlobs(ctx, e.fs.list(), e.fs.remove)
			return err
		},
		partial: true,
		effect:  func(t *testing.T) bool { return !e.fs.hasObject(atAddress) && !e.fs.hasObject(atKey) },
	}
}

// jobPrice is what the priced scenarios charge.
var jobPrice = storage.JobPrice{PerJob: 2, PerSecond: 1, Reserve: 9}

const grant = 100

func faultCreateJob(priced bool) func(t *testing.T, e *faultEnv) faultWrite {
	return func(t *testing.T, e *faultEnv) faultWrite {
		j := newJob(e.account, e.pool)
		j.IdempotencyKey = newID()
		if priced {
			mustGrant(t, e.st, e.account, grant)
			j.Price = &jobPrice
		}
		return faultWrite{
			do: func(ctx context.Context) error {
				_, err := e.st.CreateJob(ctx, j)
				return err
			},
			effect: func(t *testing.T) bool {
				_, err := e.st.GetJob(ctx(t), e.account, j.ID)
				if err != nil && !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("GetJob: %v", err)
				}
				there := err == nil
				if priced {
					b := e.balance(t, e.account)
					return oneOf(t, "job and its reservation", there && b == grant-jobPrice.Reserve, !there && b == grant)
				}
				return there
			},
		}
	}
}

// faultCreateJobBatch: creates that arrive together (a backend may write
// them in one batch); each is judged on its own answer.
func faultCreateJobBatch(t *testing.T, e *faultEnv) faultWrite {
	jobs := make([]storage.NewJob, 4)
	for i := range jobs {
		jobs[i] = newJob(e.account, e.pool)
		jobs[i].IdempotencyKey = newID()
	}
	errs := make([]error, len(jobs))
	return faultWrite{
		do: func(ctx context.Context) error {
			var wg sync.WaitGroup
			for i := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, errs[i] = e.st.CreateJob(ctx, jobs[i])
				}()
			}
			wg.Wait()
			return errors.Join(errs...)
		},
		partial: true,
		effect: func(t *testing.T) bool {
			all := true
			for i, j := range jobs {
				_, err := e.st.GetJob(ctx(t), e.account, j.ID)
				if err != nil && !errors.Is(err, storage.ErrNotFound) {
					t.Fatalf("GetJob: %v", err)
				}
				there := err == nil
				judge(t, faultWrite{}, errs[i], there)
				all = all && there
			}
			return all
		},
	}
}

// claimed creates a job in the run's pool (priced when price is set) and
// claims it.
func (e *faultEnv) claimed(t *testing.T, price *storage.JobPrice) storage.Job {
	t.Helper()
	j := newJob(e.account, e.pool)
	j.Price = price
	mustCreateJob(t, e.st, j)
	return mustClaim(t, e.st, e.fs, e.pool)
}

// faultClaimJob: a job handed back after its first attempt committed an
// output is claimed again, which drops that output and its bytes.
func faultClaimJob(t *testing.T, e *faultEnv) faultWrite {
	first := e.claimed(t, nil)
	out := newOutput("9", hashOf("claim-output"))
	o := mustAddOutput(t, e.st, e.fs, first, out)
	e.track(o.Asset)
	if _, err := e.st.ReleaseJob(ctx(t), first.ID, first.Attempt, 5, nil); err != nil {
		t.Fatalf("prepare: ReleaseJob: %v", err)
	}
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.ClaimJob(ctx, e.pool, "worker-2", time.Minute, 0, e.fs.remove)
			return err
		},
		effect: func(t *testing.T) bool {
			j := e.job(t, first.ID)
			old := e.exists(t, e.account, o.Asset.ID)
			again := j.Status == storage.JobRunning && j.Attempt == first.Attempt+1 && len(j.Outputs) == 0 && !old
			before := j.Status == storage.JobQueued && j.Attempt == first.Attempt && len(j.Outputs) == 1 && old
			return oneOf(t, fmt.Sprintf("claim (status %s, attempt %d, %d outputs, output asset %v)",
				j.Status, j.Attempt, len(j.Outputs), old), again, before)
		},
	}
}

func faultAddOutput(t *testing.T, e *faultEnv) faultWrite {
	j := e.claimed(t, nil)
	out := newOutput("9", hashOf("output"))
	pub, _ := e.fs.keyed(out.Asset.Hash)
	e.track(storage.Asset{ID: out.Asset.ID, AccountID: e.account})
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.AddOutput(ctx, j.ID, j.Attempt, out, pub)
			return err
		},
		effect: func(t *testing.T) bool {
			listed := slices.ContainsFunc(e.job(t, j.ID).Outputs, func(o storage.Output) bool { return o.Asset.ID == out.Asset.ID })
			asset := e.exists(t, e.account, out.Asset.ID)
			return oneOf(t, "output row and its asset", listed && asset, !listed && !asset)
		},
		creates: true,
	}
}

func faultFinishJob(t *testing.T, e *faultEnv) faultWrite {
	mustGrant(t, e.st, e.account, grant)
	p := jobPrice
	j := e.claimed(t, &p)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.FinishJob(ctx, j.ID, j.Attempt, storage.JobSucceeded, nil)
			return err
		},
		effect: func(t *testing.T) bool {
			got := e.job(t, j.ID)
			b := e.balance(t, e.account)
			settled := got.Credits != nil && got.Credits.Charged != nil
			done := got.Status == storage.JobSucceeded && got.CompletedAt != nil && settled &&
				b == grant-*got.Credits.Charged
			running := got.Status == storage.JobRunning && !settled && b == grant-jobPrice.Reserve
			return oneOf(t, fmt.Sprintf("finish (status %s, settled %v, balance %d)", got.Status, settled, b), done, running)
		},
	}
}

func faultReleaseJob(t *testing.T, e *faultEnv) faultWrite {
	j := e.claimed(t, nil)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.ReleaseJob(ctx, j.ID, j.Attempt, 5, nil)
			return err
		},
		effect: func(t *testing.T) bool {
			got := e.job(t, j.ID)
			return oneOf(t, "release (status "+got.Status+")", got.Status == storage.JobQueued, got.Status == storage.JobRunning)
		},
	}
}

func faultCancelJob(queuedPriced bool) func(t *testing.T, e *faultEnv) faultWrite {
	return func(t *testing.T, e *faultEnv) faultWrite {
		var j storage.Job
		if queuedPriced {
			mustGrant(t, e.st, e.account, grant)
			nj := newJob(e.account, e.pool)
			p := jobPrice
			nj.Price = &p
			j = mustCreateJob(t, e.st, nj)
		} else {
			j = e.claimed(t, nil)
		}
		return faultWrite{
			do: func(ctx context.Context) error {
				_, err := e.st.CancelJob(ctx, e.account, j.ID)
				return err
			},
			effect: func(t *testing.T) bool {
				got := e.job(t, j.ID)
				if !queuedPriced {
					return oneOf(t, "cancel (status "+got.Status+")",
						got.Status == storage.JobCanceling, got.Status == storage.JobRunning)
				}
				b := e.balance(t, e.account)
				return oneOf(t, fmt.Sprintf("cancel (status %s, balance %d)", got.Status, b),
					got.Status == storage.JobCanceled && b == grant,
					got.Status == storage.JobQueued && b == grant-jobPrice.Reserve)
			},
		}
	}
}

func faultGrantCredits(t *testing.T, e *faultEnv) faultWrite {
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.GrantCredits(ctx, e.account, grant, "fault matrix")
			return err
		},
		effect: func(t *testing.T) bool {
			b := e.balance(t, e.account)
			return oneOf(t, fmt.Sprintf("grant (balance %d)", b), b == grant, b == 0)
		},
	}
}

func faultReserveCallCredits(t *testing.T, e *faultEnv) faultWrite {
	mustGrant(t, e.st, e.account, grant)
	call := newID()
	return faultWrite{
		do: func(ctx context.Context) error { return e.st.ReserveCallCredits(ctx, e.account, call, 30) },
		effect: func(t *testing.T) bool {
			b := e.balance(t, e.account)
			return oneOf(t, fmt.Sprintf("reservation (balance %d)", b), b == grant-30, b == grant)
		},
	}
}

func faultSettleCallCredits(t *testing.T, e *faultEnv) faultWrite {
	mustGrant(t, e.st, e.account, grant)
	call := newID()
	if err := e.st.ReserveCallCredits(ctx(t), e.account, call, 30); err != nil {
		t.Fatalf("prepare: ReserveCallCredits: %v", err)
	}
	return faultWrite{
		do: func(ctx context.Context) error {
			ok, err := e.st.SettleCallCredits(ctx, call, 10)
			if err == nil && !ok {
				return errors.New("SettleCallCredits found no open reservation")
			}
			return err
		},
		effect: func(t *testing.T) bool {
			b := e.balance(t, e.account)
			return oneOf(t, fmt.Sprintf("settlement (balance %d)", b), b == grant-10, b == grant-30)
		},
	}
}

// routerStore is the store's RouterStore (both backends have one).
func (e *faultEnv) routerStore(t *testing.T) storage.RouterStore {
	t.Helper()
	rs, ok := e.st.(storage.RouterStore)
	if !ok {
		t.Fatal("the store is not a storage.RouterStore")
	}
	return rs
}

// routerCall reads a router call, reporting whether it exists.
func routerCall(t *testing.T, rs storage.RouterStore, id string) (storage.RouterCall, bool) {
	t.Helper()
	c, err := rs.GetRouterCall(ctx(t), id)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetRouterCall: %v", err)
	}
	return c, err == nil
}

func faultCreateRouterCall(t *testing.T, e *faultEnv) faultWrite {
	rs := e.routerStore(t)
	c := newRouterCall(e.account, newID())
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := rs.CreateRouterCall(ctx, c, time.Hour)
			return err
		},
		effect: func(t *testing.T) bool {
			_, there := routerCall(t, rs, c.RequestID)
			holder, err := rs.FindRouterCallByKey(ctx(t), c.WorkspaceID, c.IdempotencyKey)
			if err != nil && !errors.Is(err, storage.ErrNotFound) {
				t.Fatalf("FindRouterCallByKey: %v", err)
			}
			keyed := err == nil && holder.RequestID == c.RequestID
			return oneOf(t, "router call and its key", there && keyed, !there && !keyed)
		},
	}
}

func faultUpdateRouterCall(t *testing.T, e *faultEnv) faultWrite {
	rs := e.routerStore(t)
	c, err := rs.CreateRouterCall(ctx(t), newRouterCall(e.account, ""), time.Hour)
	if err != nil {
		t.Fatalf("prepare: CreateRouterCall: %v", err)
	}
	done := c
	done.State, done.HTTPStatus, done.ChargedCents = storage.RouterAnswered, 200, 5
	return faultWrite{
		do: func(ctx context.Context) error { return rs.UpdateRouterCall(ctx, done) },
		effect: func(t *testing.T) bool {
			got, _ := routerCall(t, rs, c.RequestID)
			return oneOf(t, "router call state "+got.State, got.State == storage.RouterAnswered && got.ChargedCents == 5,
				got.State == storage.RouterRunning && got.ChargedCents == 0)
		},
	}
}

func faultRecordRouterCalls(t *testing.T, e *faultEnv) faultWrite {
	rs := e.routerStore(t)
	calls := []storage.RouterCall{newRouterCall(e.account, ""), newRouterCall(e.account, "")}
	for i := range calls {
		calls[i].State, calls[i].HTTPStatus = storage.RouterAnswered, 200
	}
	return faultWrite{
		do: func(ctx context.Context) error { return rs.RecordRouterCalls(ctx, calls) },
		effect: func(t *testing.T) bool {
			_, a := routerCall(t, rs, calls[0].RequestID)
			_, b := routerCall(t, rs, calls[1].RequestID)
			return oneOf(t, "recorded calls", a && b, !a && !b)
		},
	}
}

// deployment reads a deployment, reporting whether it exists.
func (e *faultEnv) deployment(t *testing.T, id string) (storage.Deployment, bool) {
	t.Helper()
	d, err := e.st.GetDeployment(ctx(t), id)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Fatalf("GetDeployment: %v", err)
	}
	return d, err == nil
}

func faultCreateDeployment(t *testing.T, e *faultEnv) faultWrite {
	d := newDeployment(e.account)
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.CreateDeployment(ctx, d)
			return err
		},
		effect: func(t *testing.T) bool {
			_, there := e.deployment(t, d.ID)
			return there
		},
	}
}

func faultSetDeploymentState(t *testing.T, e *faultEnv) faultWrite {
	d := mustCreateDeployment(t, e.st, newDeployment(e.account))
	return faultWrite{
		do: func(ctx context.Context) error {
			_, err := e.st.SetDeploymentState(ctx, d.ID, storage.DeploymentReady)
			return err
		},
		effect: func(t *testing.T) bool {
			got, _ := e.deployment(t, d.ID)
			return oneOf(t, "deployment state "+got.State, got.State == storage.DeploymentReady, got.State == d.State)
		},
	}
}

func faultDeleteDeployment(t *testing.T, e *faultEnv) faultWrite {
	d := mustCreateDeployment(t, e.st, newDeployment(e.account))
	return faultWrite{
		do: func(ctx context.Context) error { return e.st.DeleteDeployment(ctx, d.ID) },
		effect: func(t *testing.T) bool {
			_, there := e.deployment(t, d.ID)
			return !there
		},
	}
}
