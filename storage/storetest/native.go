package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// nativeCases cover storage.NativeStore, the ComfyUI front's records.
var nativeCases = []storeCase{
	{"PromptRecords", testNativePromptRecords},
	{"ClientJobs", testNativeClientJobs},
	{"HistoryHidden", testNativeHistoryHidden},
	{"TooManyIDs", testNativeTooManyIDs},
}

func testNativePromptRecords(t *testing.T, st storage.Store) {
	a, b := newID(), newID()
	jobA := mustCreateJob(t, st, newJob(a, "p"))
	jobB := mustCreateJob(t, st, newJob(b, "p"))
	if err := st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: jobA.ID, AccountID: a, ClientID: "client-1"}); err != nil {
		t.Fatalf("CreateNativePrompt: %v", err)
	}
	err := st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: jobA.ID, AccountID: a, ClientID: "other"})
	wantErr(t, "second record of a job", err, storage.ErrDuplicate)
	err = st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: jobB.ID, AccountID: a, ClientID: "x"})
	wantNotFound(t, "record of another account's job", err)
	err = st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: newID(), AccountID: a})
	wantNotFound(t, "record of no job", err)
	err = st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: "not-a-uuid", AccountID: a})
	wantNotFound(t, "record of a malformed id", err)

	got, err := st.NativePrompts(ctx(t), a, []string{jobA.ID, jobB.ID, "not-a-uuid", newID()})
	if err != nil {
		t.Fatalf("NativePrompts: %v", err)
	}
	want := map[string]storage.NativePrompt{jobA.ID: {JobID: jobA.ID, AccountID: a, ClientID: "client-1"}}
	if len(got) != 1 || got[jobA.ID] != want[jobA.ID] {
		t.Errorf("NativePrompts(a) = %+v, want %+v", got, want)
	}
	if got, err := st.NativePrompts(ctx(t), b, []string{jobA.ID}); err != nil || len(got) != 0 {
		t.Errorf("NativePrompts(b, a's job) = %+v, %v; want none", got, err)
	}
	if got, err := st.NativePrompts(ctx(t), a, nil); err != nil || len(got) != 0 {
		t.Errorf("NativePrompts(a, nil) = %+v, %v; want none", got, err)
	}
}

func testNativeClientJobs(t *testing.T, st storage.Store) {
	a, b := newID(), newID()
	record := func(account, client string) storage.Job {
		j := mustCreateJob(t, st, newJob(account, "p"))
		if err := st.CreateNativePrompt(ctx(t), storage.NativePrompt{JobID: j.ID, AccountID: account, ClientID: client}); err != nil {
			t.Fatalf("CreateNativePrompt: %v", err)
		}
		time.Sleep(2 * time.Millisecond) // distinct creation times: the order is oldest first
		return j
	}
	first := record(a, "c1")
	canceled := record(a, "c1")
	second := record(a, "c1")
	record(a, "c2")
	record(b, "c1")
	mustCreateJob(t, st, newJob(a, "p")) // a v2 job: no record
	if _, err := st.CancelJob(ctx(t), a, canceled.ID); err != nil {
		t.Fatal(err)
	}
	got, err := st.ClientJobs(ctx(t), a, "c1", 10)
	if err != nil {
		t.Fatalf("ClientJobs: %v", err)
	}
	if want := []string{first.ID, second.ID}; !slices.Equal(got, want) {
		t.Errorf("ClientJobs(a, c1) = %v, want %v (unfinished, oldest first)", got, want)
	}
	if got, err := st.ClientJobs(ctx(t), a, "c1", 1); err != nil || !slices.Equal(got, []string{first.ID}) {
		t.Errorf("ClientJobs(limit 1) = %v, %v; want [%s]", got, err, first.ID)
	}
	if got, err := st.ClientJobs(ctx(t), a, "nobody", 10); err != nil || len(got) != 0 {
		t.Errorf("ClientJobs(unknown client) = %v, %v; want none", got, err)
	}
}

func testNativeHistoryHidden(t *testing.T, st storage.Store) {
	a, b := newID(), newID()
	j1 := mustCreateJob(t, st, newJob(a, "p"))
	j2 := mustCreateJob(t, st, newJob(a, "p"))
	jb := mustCreateJob(t, st, newJob(b, "p"))
	ids := []string{j1.ID, j2.ID, jb.ID}

	hidden, mark, err := st.HistoryHidden(ctx(t), a, ids)
	if err != nil || len(hidden) != 0 || !mark.IsZero() {
		t.Fatalf("HistoryHidden before any hide = %v, %v, %v; want none, zero", hidden, mark, err)
	}
	for range 2 { // hiding twice is a no-op
		if err := st.HideFromHistory(ctx(t), a, []string{j1.ID, jb.ID, newID(), "not-a-uuid"}); err != nil {
			t.Fatalf("HideFromHistory: %v", err)
		}
	}
	hidden, _, err = st.HistoryHidden(ctx(t), a, ids)
	if err != nil || !hidden[j1.ID] || len(hidden) != 1 {
		t.Errorf("HistoryHidden(a) = %v, %v; want only %s", hidden, err, j1.ID)
	}
	hidden, _, err = st.HistoryHidden(ctx(t), b, ids)
	if err != nil || len(hidden) != 0 {
		t.Errorf("HistoryHidden(b) = %v, %v; b's job was hidden by a, or a's hide leaked", hidden, err)
	}

	at := micro(time.Now())
	if err := st.ClearHistory(ctx(t), a, at); err != nil {
		t.Fatalf("ClearHistory: %v", err)
	}
	if err := st.ClearHistory(ctx(t), a, at.Add(-time.Hour)); err != nil {
		t.Fatalf("ClearHistory(earlier): %v", err)
	}
	_, mark, err = st.HistoryHidden(ctx(t), a, nil)
	if err != nil || !mark.Equal(at) {
		t.Errorf("clear mark = %v, %v; want %v (an earlier clear never moves it back)", mark, err, at)
	}
	checkUTC(t, "clear mark", mark)
	if _, mark, err := st.HistoryHidden(ctx(t), b, nil); err != nil || !mark.IsZero() {
		t.Errorf("b's clear mark = %v, %v; want zero", mark, err)
	}
	later := at.Add(time.Minute)
	if err := st.ClearHistory(ctx(t), a, later); err != nil {
		t.Fatal(err)
	}
	if _, mark, _ := st.HistoryHidden(ctx(t), a, nil); !mark.Equal(later) {
		t.Errorf("clear mark after a later clear = %v, want %v", mark, later)
	}
}

func testNativeTooManyIDs(t *testing.T, st storage.Store) {
	ids := make([]string, storage.MaxNativeIDs+1)
	for i := range ids {
		ids[i] = newID()
	}
	a := newID()
	if _, err := st.NativePrompts(ctx(t), a, ids); err == nil {
		t.Error("NativePrompts accepted more than MaxNativeIDs ids")
	}
	if err := st.HideFromHistory(ctx(t), a, ids); err == nil {
		t.Error("HideFromHistory accepted more than MaxNativeIDs ids")
	}
	if _, _, err := st.HistoryHidden(ctx(t), a, ids); err == nil {
		t.Error("HistoryHidden accepted more than MaxNativeIDs ids")
	}
	if err := st.HideFromHistory(ctx(t), a, ids[:storage.MaxNativeIDs]); err != nil && !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("HideFromHistory(MaxNativeIDs ids) = %v, want nil", err)
	}
}
