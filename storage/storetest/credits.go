package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// creditCases cover the ledger: grants, balances, router-call reservations
// and usage. Job reservations and settlements are in credits_jobs.go.
var creditCases = []storeCase{
	{"GrantBalanceLedger", testGrantBalanceLedger},
	{"CallReserveSettleOnce", testCallReserveSettleOnce},
	{"StaleCallsSettled", testStaleCallsSettled},
	{"Usage", testCreditUsage},
}

// checkLedger fails unless the account's balance is want, is not negative
// and equals the sum of its ledger's entries; it returns the entries.
func checkLedger(t *testing.T, st storage.Store, account string, want int64) []storage.CreditEntry {
	t.Helper()
	bal, err := st.CreditBalance(ctx(t), account)
	if err != nil {
		t.Fatalf("CreditBalance: %v", err)
	}
	entries, err := st.CreditLedger(ctx(t), account, time.Time{})
	if err != nil {
		t.Fatalf("CreditLedger: %v", err)
	}
	var sum int64
	for _, e := range entries {
		sum += e.Amount
		if e.AccountID != account {
			t.Errorf("entry %d of %s names account %s", e.Seq, account, e.AccountID)
		}
	}
	if bal != want || sum != bal || bal < 0 {
		t.Fatalf("balance %d, entries sum to %d; want both %d", bal, sum, want)
	}
	return entries
}

// entriesFor returns the entries of kind for job or call id.
func entriesFor(entries []storage.CreditEntry, kind, id string) []storage.CreditEntry {
	var out []storage.CreditEntry
	for _, e := range entries {
		if e.Kind == kind && (e.JobID == id || e.CallID == id) {
			out = append(out, e)
		}
	}
	return out
}

// checkOverdraft checks that a refused debit names the balance that
// refused it, in its figures and its message.
func checkOverdraft(t *testing.T, err error, account string, balance, amount int64) {
	t.Helper()
	var o *storage.OverdraftError
	if !errors.As(err, &o) || o.AccountID != account || o.Balance != balance || o.Amount != amount {
		t.Fatalf("refused debit: %#v, want an OverdraftError of %d from a balance of %d", err, amount, balance)
	}
	if want := fmt.Sprintf("has a balance of %d, a debit of %d", balance, -amount); !strings.Contains(err.Error(), want) {
		t.Fatalf("refused debit says %q, want %q in it", err, want)
	}
}

// mustGrant grants amount to account and fails the test on error.
func mustGrant(t *testing.T, st storage.Store, account string, amount int64) {
	t.Helper()
	if _, err := st.GrantCredits(ctx(t), account, amount, "test"); err != nil {
		t.Fatalf("GrantCredits(%d): %v", amount, err)
	}
}

func testGrantBalanceLedger(t *testing.T, st storage.Store) {
	account, other := newID(), newID()
	if bal, err := st.CreditBalance(ctx(t), account); err != nil || bal != 0 {
		t.Fatalf("balance without a ledger = %d, %v; want 0", bal, err)
	}
	if _, err := st.GrantCredits(ctx(t), account, -5, "no ledger yet"); !errors.Is(err, storage.ErrInsufficientCredits) {
		t.Fatalf("negative first grant: %v, want ErrInsufficientCredits", err)
	} else {
		checkOverdraft(t, err, account, 0, -5)
	}
	before := time.Now().Add(-time.Second)
	e, err := st.GrantCredits(ctx(t), account, 100, "welcome")
	if err != nil {
		t.Fatal(err)
	}
	if e.Kind != storage.CreditGrant || e.Amount != 100 || e.Note != "welcome" || e.AccountID != account ||
		e.JobID != "" || e.CallID != "" || e.CreatedAt.Before(before) || e.CreatedAt.Location() != time.UTC {
		t.Fatalf("grant entry = %+v", e)
	}
	mustGrant(t, st, account, -30)
	if _, err := st.GrantCredits(ctx(t), account, -71, "too much"); !errors.Is(err, storage.ErrInsufficientCredits) {
		t.Fatalf("overdrawing grant: %v, want ErrInsufficientCredits", err)
	} else {
		checkOverdraft(t, err, account, 70, -71)
	}
	for _, bad := range []int64{0, storage.MaxCredits + 1} {
		if _, err := st.GrantCredits(ctx(t), account, bad, ""); err == nil {
			t.Errorf("grant of %d accepted", bad)
		}
	}
	if _, err := st.GrantCredits(ctx(t), "", 5, ""); err == nil {
		t.Error("grant to an empty account accepted")
	}
	mustGrant(t, st, other, 7)
	entries := checkLedger(t, st, account, 70)
	if len(entries) != 2 || entries[0].Seq >= entries[1].Seq || entries[1].Amount != -30 {
		t.Fatalf("ledger = %+v", entries)
	}
	checkLedger(t, st, other, 7)
	later, err := st.CreditLedger(ctx(t), account, time.Now().Add(time.Hour))
	if err != nil || len(later) != 0 {
		t.Fatalf("ledger since an hour ahead = %d entries, %v", len(later), err)
	}
}

func testCallReserveSettleOnce(t *testing.T, st storage.Store) {
	account := newID()
	if err := st.ReserveCallCredits(ctx(t), account, "call-0", 5); !errors.Is(err, storage.ErrInsufficientCredits) {
		t.Fatalf("reserve without a ledger: %v", err)
	}
	mustGrant(t, st, account, 20)
	if err := st.ReserveCallCredits(ctx(t), account, "call-1", 15); err != nil {
		t.Fatal(err)
	}
	if err := st.ReserveCallCredits(ctx(t), account, "call-2", 6); !errors.Is(err, storage.ErrInsufficientCredits) {
		t.Fatalf("reserve over the balance: %v", err)
	}
	if err := st.ReserveCallCredits(ctx(t), account, "call-1", 1); !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("second reservation of one call: %v, want ErrDuplicate", err)
	}
	checkLedger(t, st, account, 5)
	// Charged more than reserved: capped.
	if ok, err := st.SettleCallCredits(ctx(t), "call-1", 40); err != nil || !ok {
		t.Fatalf("settle = %v, %v", ok, err)
	}
	for range 2 {
		if ok, err := st.SettleCallCredits(ctx(t), "call-1", 3); err != nil || ok {
			t.Fatalf("second settle = %v, %v; want false (settled once)", ok, err)
		}
	}
	if ok, err := st.SettleCallCredits(ctx(t), "never-reserved", 3); err != nil || ok {
		t.Fatalf("settle of an unknown call = %v, %v", ok, err)
	}
	entries := checkLedger(t, st, account, 5)
	if s := entriesFor(entries, storage.CreditSettlement, "call-1"); len(s) != 1 || s[0].Charged != 15 || s[0].Amount != 0 {
		t.Fatalf("settlement entries = %+v", s)
	}
	// A refund gives everything back.
	if err := st.ReserveCallCredits(ctx(t), account, "call-3", 5); err != nil {
		t.Fatal(err)
	}
	if ok, err := st.SettleCallCredits(ctx(t), "call-3", 0); err != nil || !ok {
		t.Fatalf("refund = %v, %v", ok, err)
	}
	entries = checkLedger(t, st, account, 5)
	if r := entriesFor(entries, storage.CreditRefund, "call-3"); len(r) != 1 || r[0].Amount != 5 || r[0].Charged != 0 {
		t.Fatalf("refund entries = %+v", r)
	}
}

func testStaleCallsSettled(t *testing.T, st storage.Store) {
	rs, ok := st.(storage.RouterStore)
	if !ok {
		t.Skip("the store keeps no router calls")
	}
	account := newID()
	mustGrant(t, st, account, 100)
	answered, running := "stale-answered-"+newID(), "stale-running-"+newID()
	for _, id := range []string{answered, running, "stale-unrecorded", "fresh"} {
		if err := st.ReserveCallCredits(ctx(t), account, id, 10); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	if err := rs.RecordRouterCalls(ctx(t), []storage.RouterCall{
		{RequestID: answered, WorkspaceID: account, ModelID: "m", State: storage.RouterAnswered, ReservedCents: 10,
			ChargedCents: 7, FinishedAt: &now},
		{RequestID: running, WorkspaceID: account, ModelID: "m", State: storage.RouterRunning, ReservedCents: 10},
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := st.SettleStaleCallCredits(ctx(t), time.Now().Add(-time.Hour)); err != nil || n != 0 {
		t.Fatalf("settled %d fresh reservations, %v", n, err)
	}
	// "fresh" is settled by its owner first.
	if _, err := st.SettleCallCredits(ctx(t), "fresh", 2); err != nil {
		t.Fatal(err)
	}
	if n, err := st.SettleStaleCallCredits(ctx(t), time.Now().Add(time.Minute)); err != nil || n != 3 {
		t.Fatalf("settled %d stale reservations, %v; want 3", n, err)
	}
	entries := checkLedger(t, st, account, 100-7-2)
	if s := entriesFor(entries, storage.CreditSettlement, answered); len(s) != 1 || s[0].Charged != 7 {
		t.Errorf("answered call: %+v", s)
	}
	for _, id := range []string{running, "stale-unrecorded"} {
		if r := entriesFor(entries, storage.CreditRefund, id); len(r) != 1 || r[0].Amount != 10 {
			t.Errorf("call %s: %+v, want a refund", id, r)
		}
	}
	if n, err := st.SettleStaleCallCredits(ctx(t), time.Now().Add(time.Minute)); err != nil || n != 0 {
		t.Fatalf("second sweep settled %d, %v", n, err)
	}
}

func testCreditUsage(t *testing.T, st storage.Store) {
	fs := newFakeFS()
	a, b, pool := newID(), newID(), newID()
	mustGrant(t, st, a, 100)
	since := time.Now().Add(-time.Second)
	price := &storage.JobPrice{PerJob: 3, Reserve: 10}
	for range 2 {
		j := newJob(a, pool)
		j.Price = price
		mustCreateJob(t, st, j)
		job := mustClaim(t, st, fs, pool)
		if _, err := st.FinishJob(ctx(t), job.ID, job.Attempt, storage.JobSucceeded, nil); err != nil {
			t.Fatal(err)
		}
	}
	mustCreateJob(t, st, newJob(b, pool)) // queued: not used yet
	if err := st.ReserveCallCredits(ctx(t), a, "usage-call", 4); err != nil {
		t.Fatal(err)
	}
	if _, err := st.SettleCallCredits(ctx(t), "usage-call", 4); err != nil {
		t.Fatal(err)
	}
	if rs, ok := st.(storage.RouterStore); ok {
		now := time.Now().UTC()
		if err := rs.RecordRouterCalls(ctx(t), []storage.RouterCall{{RequestID: "usage-call", WorkspaceID: a,
			ModelID: "m", State: storage.RouterAnswered, ChargedCents: 4, FinishedAt: &now}}); err != nil {
			t.Fatal(err)
		}
	}
	usage, err := st.CreditUsage(ctx(t), since)
	if err != nil {
		t.Fatal(err)
	}
	var got *storage.CreditUsage
	for i := range usage {
		if usage[i].AccountID == b {
			t.Errorf("account with only a queued job in usage: %+v", usage[i])
		}
		if usage[i].AccountID == a {
			got = &usage[i]
		}
	}
	if got == nil || got.Jobs != 2 || got.Credits != 2*3+4 || got.ExecutionMS < 0 {
		t.Fatalf("usage of a = %+v (all: %+v)", got, usage)
	}
	if _, ok := st.(storage.RouterStore); ok && got.RouterCalls != 1 {
		t.Errorf("router calls = %d, want 1", got.RouterCalls)
	}
	if later, err := st.CreditUsage(ctx(t), time.Now().Add(time.Hour)); err != nil || len(later) != 0 {
		t.Fatalf("usage from an hour ahead = %+v, %v", later, err)
	}
}
