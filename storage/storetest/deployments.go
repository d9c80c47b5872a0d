package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// deploymentCases cover the deployment registry.
var deploymentCases = []storeCase{
	{"CreateGetRoundTrip", testDeploymentRoundTrip},
	{"BadIDsRefused", testDeploymentBadIDs},
	{"DuplicateID", testDeploymentDuplicate},
	{"StateMachine", testDeploymentStates},
	{"List", testDeploymentList},
	{"DeleteAndRecreate", testDeploymentDelete},
}

// depID returns a fresh deployment id (a DNS label).
func depID() string { return "dep-" + newID()[:8] }

func newDeployment(account string) storage.Deployment {
	return storage.Deployment{ID: depID(), AccountID: account, Pool: "builtin", State: storage.DeploymentProvisioning}
}

func mustCreateDeployment(t *testing.T, st storage.Store, d storage.Deployment) storage.Deployment {
	t.Helper()
	got, err := st.CreateDeployment(ctx(t), d)
	if err != nil {
		t.Fatalf("CreateDeployment(%s): %v", d.ID, err)
	}
	return got
}

func diffDeployment(t *testing.T, what string, got, want storage.Deployment) {
	t.Helper()
	if got.ID != want.ID || got.AccountID != want.AccountID || got.Pool != want.Pool ||
		got.Public != want.Public || got.State != want.State {
		t.Errorf("%s = %+v, want %+v", what, got, want)
	}
	if !want.CreatedAt.IsZero() && (!got.CreatedAt.Equal(want.CreatedAt) || !got.UpdatedAt.Equal(want.UpdatedAt)) {
		t.Errorf("%s times = %v/%v, want %v/%v", what, got.CreatedAt, got.UpdatedAt, want.CreatedAt, want.UpdatedAt)
	}
	checkUTC(t, what+" CreatedAt", got.CreatedAt)
	checkUTC(t, what+" UpdatedAt", got.UpdatedAt)
}

func testDeploymentRoundTrip(t *testing.T, st storage.Store) {
	before := time.Now().Add(-time.Minute)
	in := storage.Deployment{ID: depID(), AccountID: newID(), Pool: "gpu-a", Public: true, State: storage.DeploymentProvisioning}
	created := mustCreateDeployment(t, st, in)
	diffDeployment(t, "CreateDeployment", created, in)
	if created.CreatedAt.Before(before) || !created.UpdatedAt.Equal(created.CreatedAt) {
		t.Errorf("times = %v/%v, want about now and equal", created.CreatedAt, created.UpdatedAt)
	}
	got, err := st.GetDeployment(ctx(t), in.ID)
	if err != nil {
		t.Fatalf("GetDeployment: %v", err)
	}
	diffDeployment(t, "GetDeployment", got, created)
	_, err = st.GetDeployment(ctx(t), depID())
	wantNotFound(t, "GetDeployment unknown", err)
}

// badDeploymentIDs are ids no store may hold or resolve.
var badDeploymentIDs = []string{"", "Upper", "UPPER", strings.Repeat("a", 64), "-x", "x-", "..", "a.b", "a_b", "ü", " x", "x/y"}

func testDeploymentBadIDs(t *testing.T, st storage.Store) {
	for _, id := range badDeploymentIDs {
		d := newDeployment(newID())
		d.ID = id
		if _, err := st.CreateDeployment(ctx(t), d); err == nil {
			t.Errorf("CreateDeployment(%q) succeeded, want an error", id)
		}
		_, err := st.GetDeployment(ctx(t), id)
		wantNotFound(t, "GetDeployment("+id+")", err)
		if _, err := st.SetDeploymentState(ctx(t), id, storage.DeploymentReady); err == nil {
			t.Errorf("SetDeploymentState(%q) succeeded, want an error", id)
		}
	}
	for _, id := range []string{"a", "0", strings.Repeat("a", 63), "a-b", "a--b", "9lives"} {
		d := newDeployment(newID())
		d.ID = id
		mustCreateDeployment(t, st, d)
	}
	for _, bad := range []storage.Deployment{
		{ID: depID(), AccountID: "", Pool: "p", State: storage.DeploymentReady},
		{ID: depID(), AccountID: "a", Pool: "", State: storage.DeploymentReady},
		{ID: depID(), AccountID: "a", Pool: "p", State: "running"},
	} {
		if _, err := st.CreateDeployment(ctx(t), bad); err == nil {
			t.Errorf("CreateDeployment(%+v) succeeded, want an error", bad)
		}
		_, err := st.GetDeployment(ctx(t), bad.ID)
		wantNotFound(t, "GetDeployment after a refused create", err)
	}
}

func testDeploymentDuplicate(t *testing.T, st storage.Store) {
	d := mustCreateDeployment(t, st, newDeployment(newID()))
	other := newDeployment(newID())
	other.ID = d.ID
	_, err := st.CreateDeployment(ctx(t), other)
	wantErr(t, "CreateDeployment with a taken id", err, storage.ErrDuplicate)
	got, _ := st.GetDeployment(ctx(t), d.ID)
	if got.AccountID != d.AccountID {
		t.Errorf("the refused create changed the owner to %s", got.AccountID)
	}
}

func testDeploymentStates(t *testing.T, st storage.Store) {
	d := mustCreateDeployment(t, st, newDeployment(newID()))
	last := d.UpdatedAt
	for _, s := range []string{storage.DeploymentStarting, storage.DeploymentProvisioning, storage.DeploymentStarting,
		storage.DeploymentReady, storage.DeploymentStarting, storage.DeploymentReady, storage.DeploymentStopped} {
		waitClockTick()
		got, err := st.SetDeploymentState(ctx(t), d.ID, s)
		if err != nil {
			t.Fatalf("SetDeploymentState(%s): %v", s, err)
		}
		if got.State != s || !got.UpdatedAt.After(last) || !got.CreatedAt.Equal(d.CreatedAt) {
			t.Errorf("after %s: %+v (previous update %v)", s, got, last)
		}
		read, _ := st.GetDeployment(ctx(t), d.ID)
		diffDeployment(t, "GetDeployment after "+s, read, got)
		last = got.UpdatedAt
	}
	for _, s := range []string{storage.DeploymentProvisioning, storage.DeploymentStarting, storage.DeploymentReady} {
		_, err := st.SetDeploymentState(ctx(t), d.ID, s)
		wantErr(t, "stopped → "+s, err, storage.ErrDeploymentStopped)
	}
	again, err := st.SetDeploymentState(ctx(t), d.ID, storage.DeploymentStopped)
	if err != nil || again.State != storage.DeploymentStopped || !again.UpdatedAt.Equal(last) {
		t.Errorf("stopping twice = %+v, %v; want the stopped record unchanged", again, err)
	}
	if _, err := st.SetDeploymentState(ctx(t), d.ID, "paused"); err == nil || errors.Is(err, storage.ErrNotFound) {
		t.Errorf("unknown state: err = %v, want a refusal", err)
	}
	_, err = st.SetDeploymentState(ctx(t), depID(), storage.DeploymentReady)
	wantNotFound(t, "SetDeploymentState unknown", err)
}

func testDeploymentList(t *testing.T, st storage.Store) {
	a, b := newID(), newID()
	var mine []storage.Deployment
	for range 3 {
		mine = append(mine, mustCreateDeployment(t, st, newDeployment(a)))
		waitClockTick()
	}
	theirs := mustCreateDeployment(t, st, newDeployment(b))
	got, err := st.ListDeployments(ctx(t), a)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("ListDeployments(a) = %d, want 3", len(got))
	}
	for i := range got {
		diffDeployment(t, "ListDeployments(a)", got[i], mine[i])
	}
	all, err := st.ListDeployments(ctx(t), "")
	if err != nil || len(all) != 4 || all[3].ID != theirs.ID {
		t.Errorf("ListDeployments(\"\") = %d, %v; want all 4, oldest first", len(all), err)
	}
	none, err := st.ListDeployments(ctx(t), newID())
	if err != nil || none == nil || len(none) != 0 {
		t.Errorf("ListDeployments(nobody) = %#v, %v; want empty and non-nil", none, err)
	}
}

func testDeploymentDelete(t *testing.T, st storage.Store) {
	d := mustCreateDeployment(t, st, newDeployment(newID()))
	if _, err := st.SetDeploymentState(ctx(t), d.ID, storage.DeploymentStopped); err != nil {
		t.Fatal(err)
	}
	if err := st.DeleteDeployment(ctx(t), d.ID); err != nil {
		t.Fatalf("DeleteDeployment: %v", err)
	}
	_, err := st.GetDeployment(ctx(t), d.ID)
	wantNotFound(t, "GetDeployment after delete", err)
	wantNotFound(t, "DeleteDeployment twice", st.DeleteDeployment(ctx(t), d.ID))
	again := newDeployment(newID())
	again.ID = d.ID
	re := mustCreateDeployment(t, st, again)
	if re.State != storage.DeploymentProvisioning || re.AccountID != again.AccountID {
		t.Errorf("re-created = %+v", re)
	}
}
