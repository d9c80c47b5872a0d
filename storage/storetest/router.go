package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

// RunRouter runs the RouterStore conformance cases. open returns a fresh,
// migrated store that the test's cleanup closes.
func RunRouter(t *testing.T, open func(t *testing.T) storage.RouterStore) {
	cases := []struct {
		name string
		fn   func(t *testing.T, st storage.RouterStore)
	}{
		{"CreateGetUpdate", testRouterCreateGetUpdate},
		{"KeyClaimAndHolder", testRouterKeyClaim},
		{"KeyScopedByWorkspace", testRouterKeyWorkspace},
		{"ReleaseFreesKey", testRouterRelease},
		{"ExpiredKeyTakenOver", testRouterExpiredKey},
		{"ConcurrentClaimsOneWinner", testRouterConcurrentClaims},
		{"UnknownRecords", testRouterUnknown},
		{"RecordBatch", testRouterRecordBatch},
		{"FinishedNeverReopened", testRouterNoReopen},
		{"TouchAndClaimStale", testRouterTouchClaim},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, open(t))
		})
	}
}

func newRouterCall(ws, key string) storage.RouterCall {
	return storage.RouterCall{
		RequestID: newID(), WorkspaceID: ws, ModelID: "fal/flux-dev",
		ReservedCents: 7, IdempotencyKey: key, Fingerprint: "fp-" + key,
	}
}

func testRouterCreateGetUpdate(t *testing.T, st storage.RouterStore) {
	c := newRouterCall(newID(), "")
	created, err := st.CreateRouterCall(ctx(t), c, time.Hour)
	if err != nil {
		t.Fatalf("CreateRouterCall: %v", err)
	}
	if created.State != storage.RouterRunning || created.KeyExpiresAt != nil || created.CreatedAt.IsZero() {
		t.Errorf("created = %+v: want running, no key expiry, a creation time", created)
	}
	got, err := st.GetRouterCall(ctx(t), c.RequestID)
	if err != nil {
		t.Fatalf("GetRouterCall: %v", err)
	}
	if got.WorkspaceID != c.WorkspaceID || got.ModelID != c.ModelID || got.ReservedCents != 7 ||
		got.State != storage.RouterRunning || got.ProviderHandle != nil || got.IdempotencyKey != "" {
		t.Errorf("got %+v", got)
	}
	checkUTC(t, "CreatedAt", got.CreatedAt)
	fin := micro(time.Now())
	got.State, got.Bucket, got.HTTPStatus = storage.RouterAnswered, "content_policy_violation", 400
	got.ChargedCents = 5
	got.ProviderHandle = []byte(`{"kind":"fal","request_id":"r1"}`)
	got.ResponseStatus, got.ResponseContentType = 400, "application/json"
	got.ResponseBody = []byte{0, 1, 2, '{'}
	got.Replayable, got.RehostFailed = true, 2
	got.FinishedAt = &fin
	if err := st.UpdateRouterCall(ctx(t), got); err != nil {
		t.Fatalf("UpdateRouterCall: %v", err)
	}
	again, err := st.GetRouterCall(ctx(t), c.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if again.State != storage.RouterAnswered || again.Bucket != "content_policy_violation" ||
		again.HTTPStatus != 400 || again.ChargedCents != 5 || !again.Replayable || again.RehostFailed != 2 ||
		again.ResponseStatus != 400 || again.ResponseContentType != "application/json" ||
		!bytes.Equal(again.ResponseBody, got.ResponseBody) || again.FinishedAt == nil || !again.FinishedAt.Equal(fin) {
		t.Errorf("after update: %+v", again)
	}
	if !bytes.Contains(again.ProviderHandle, []byte(`"request_id"`)) {
		t.Errorf("handle = %s", again.ProviderHandle)
	}
}

func testRouterKeyClaim(t *testing.T, st storage.RouterStore) {
	ws := newID()
	first := newRouterCall(ws, "key-1")
	created, err := st.CreateRouterCall(ctx(t), first, time.Hour)
	if err != nil {
		t.Fatalf("first claim: %v", err)
	}
	if created.KeyExpiresAt == nil || created.KeyExpiresAt.Before(time.Now().Add(50*time.Minute)) {
		t.Errorf("key expiry = %v, want about an hour ahead", created.KeyExpiresAt)
	}
	second := newRouterCall(ws, "key-1")
	holder, err := st.CreateRouterCall(ctx(t), second, time.Hour)
	if !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("second claim err = %v, want ErrDuplicate", err)
	}
	if holder.RequestID != first.RequestID || holder.Fingerprint != "fp-key-1" {
		t.Errorf("holder = %+v, want the first call", holder)
	}
	if _, err := st.GetRouterCall(ctx(t), second.RequestID); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("refused claim left a record: %v", err)
	}
	found, err := st.FindRouterCallByKey(ctx(t), ws, "key-1")
	if err != nil || found.RequestID != first.RequestID {
		t.Errorf("FindRouterCallByKey = %+v, %v", found, err)
	}
}

func testRouterKeyWorkspace(t *testing.T, st storage.RouterStore) {
	a, b := newRouterCall(newID(), "shared"), newRouterCall(newID(), "shared")
	for _, c := range []storage.RouterCall{a, b} {
		if _, err := st.CreateRouterCall(ctx(t), c, time.Hour); err != nil {
			t.Fatalf("claim in workspace %s: %v", c.WorkspaceID, err)
		}
	}
}

func testRouterRelease(t *testing.T, st storage.RouterStore) {
	ws := newID()
	first := newRouterCall(ws, "k")
	if _, err := st.CreateRouterCall(ctx(t), first, time.Hour); err != nil {
		t.Fatal(err)
	}
	// A release by a request that does not hold the key changes nothing.
	if err := st.ReleaseRouterKey(ctx(t), ws, "k", newID()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateRouterCall(ctx(t), newRouterCall(ws, "k"), time.Hour); !errors.Is(err, storage.ErrDuplicate) {
		t.Fatalf("claim after foreign release: %v, want ErrDuplicate", err)
	}
	if err := st.ReleaseRouterKey(ctx(t), ws, "k", first.RequestID); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FindRouterCallByKey(ctx(t), ws, "k"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("find after release: %v, want ErrNotFound", err)
	}
	next := newRouterCall(ws, "k")
	if _, err := st.CreateRouterCall(ctx(t), next, time.Hour); err != nil {
		t.Fatalf("claim after release: %v", err)
	}
	if _, err := st.GetRouterCall(ctx(t), first.RequestID); err != nil {
		t.Errorf("release dropped the audit record: %v", err)
	}
}

func testRouterExpiredKey(t *testing.T, st storage.RouterStore) {
	ws := newID()
	if _, err := st.CreateRouterCall(ctx(t), newRouterCall(ws, "short"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if _, err := st.FindRouterCallByKey(ctx(t), ws, "short"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("find expired key: %v, want ErrNotFound", err)
	}
	next := newRouterCall(ws, "short")
	if _, err := st.CreateRouterCall(ctx(t), next, time.Hour); err != nil {
		t.Fatalf("claim over an expired key: %v", err)
	}
	found, err := st.FindRouterCallByKey(ctx(t), ws, "short")
	if err != nil || found.RequestID != next.RequestID {
		t.Errorf("holder after takeover = %+v, %v", found, err)
	}
	if _, err := st.CreateRouterCall(ctx(t), newRouterCall(ws, "gone"), time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	n, err := st.DeleteExpiredRouterKeys(ctx(t), time.Now())
	if err != nil || n < 1 {
		t.Errorf("DeleteExpiredRouterKeys = %d, %v; want at least 1", n, err)
	}
}

func testRouterConcurrentClaims(t *testing.T, st storage.RouterStore) {
	ws := newID()
	const n = 16
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := st.CreateRouterCall(ctx(t), newRouterCall(ws, "race"), time.Hour)
			switch {
			case err == nil:
				wins.Add(1)
			case !errors.Is(err, storage.ErrDuplicate):
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected error: %v", err)
	}
	if w := wins.Load(); w != 1 {
		t.Errorf("%d claims of one key won, want exactly 1", w)
	}
}

func testRouterUnknown(t *testing.T, st storage.RouterStore) {
	if _, err := st.GetRouterCall(ctx(t), newID()); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("GetRouterCall(unknown) = %v", err)
	}
	if _, err := st.FindRouterCallByKey(ctx(t), newID(), "nope"); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("FindRouterCallByKey(unknown) = %v", err)
	}
	if err := st.UpdateRouterCall(ctx(t), newRouterCall(newID(), "")); !errors.Is(err, storage.ErrNotFound) {
		t.Errorf("UpdateRouterCall(unknown) = %v", err)
	}
}

func testRouterRecordBatch(t *testing.T, st storage.RouterStore) {
	ws := newID()
	fin := micro(time.Now())
	var batch []storage.RouterCall
	for i := range 5 {
		c := newRouterCall(ws, "")
		c.State, c.HTTPStatus, c.ChargedCents, c.FinishedAt = storage.RouterAnswered, 200, int64(i), &fin
		batch = append(batch, c)
	}
	if err := st.RecordRouterCalls(ctx(t), batch); err != nil {
		t.Fatalf("RecordRouterCalls: %v", err)
	}
	// Recording again overwrites rather than failing.
	batch[0].Bucket, batch[0].HTTPStatus = "client_disconnected", 499
	if err := st.RecordRouterCalls(ctx(t), batch[:1]); err != nil {
		t.Fatalf("RecordRouterCalls again: %v", err)
	}
	for i, c := range batch {
		got, err := st.GetRouterCall(ctx(t), c.RequestID)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got.State != storage.RouterAnswered || got.ChargedCents != int64(i) || got.WorkspaceID != ws ||
			got.FinishedAt == nil || !got.FinishedAt.Equal(fin) || got.HTTPStatus != c.HTTPStatus || got.Bucket != c.Bucket {
			t.Errorf("record %d = %+v", i, got)
		}
	}
	if err := st.RecordRouterCalls(ctx(t), nil); err != nil {
		t.Errorf("empty batch: %v", err)
	}

	// One request twice in a batch: the later record wins, as one by one;
	// a handle, a body and no finish time survive the trip.
	first := newRouterCall(ws, "")
	first.State, first.HTTPStatus, first.Bucket = storage.RouterConsumed, 504, "deadline_exceeded"
	second := first
	second.State, second.HTTPStatus, second.Bucket, second.ChargedCents = storage.RouterAnswered, 200, "", 7
	second.ProviderHandle, second.ResponseBody, second.ResponseContentType = []byte(`{"id":"gen-1"}`), []byte("png"), "image/png"
	second.RehostFailed = 1
	other := newRouterCall(ws, "")
	other.FinishedAt = nil
	if err := st.RecordRouterCalls(ctx(t), []storage.RouterCall{first, other, second}); err != nil {
		t.Fatalf("RecordRouterCalls with a repeated request: %v", err)
	}
	got, err := st.GetRouterCall(ctx(t), first.RequestID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != storage.RouterAnswered || got.HTTPStatus != 200 || got.Bucket != "" || got.ChargedCents != 7 ||
		string(got.ResponseBody) != "png" || got.ResponseContentType != "image/png" || got.RehostFailed != 1 {
		t.Errorf("repeated request = %+v, want the later record", got)
	}
	var h map[string]string
	if err := json.Unmarshal(got.ProviderHandle, &h); err != nil || h["id"] != "gen-1" {
		t.Errorf("provider handle %q (%v)", got.ProviderHandle, err)
	}
	if got, err := st.GetRouterCall(ctx(t), other.RequestID); err != nil || got.ProviderHandle != nil ||
		got.ResponseBody != nil || got.FinishedAt != nil {
		t.Errorf("record without handle, body or finish = %+v (%v)", got, err)
	}
}

// testRouterNoReopen: a late follower's write of collecting (or running)
// must not reopen a record another owner already answered.
func testRouterNoReopen(t *testing.T, st storage.RouterStore) {
	for _, final := range []string{storage.RouterAnswered, storage.RouterConsumed, storage.RouterReleased} {
		c := newRouterCall(newID(), newID())
		if _, err := st.CreateRouterCall(ctx(t), c, time.Hour); err != nil {
			t.Fatal(err)
		}
		c.State, c.ChargedCents = storage.RouterCollecting, 0
		if err := st.UpdateRouterCall(ctx(t), c); err != nil {
			t.Fatalf("running → collecting: %v", err)
		}
		c.State, c.ChargedCents = final, 7
		if err := st.UpdateRouterCall(ctx(t), c); err != nil {
			t.Fatalf("collecting → %s: %v", final, err)
		}
		for _, back := range []string{storage.RouterCollecting, storage.RouterRunning} {
			c.State, c.ChargedCents = back, 0
			if err := st.UpdateRouterCall(ctx(t), c); !errors.Is(err, storage.ErrRouterCallFinished) {
				t.Errorf("%s → %s: err %v, want ErrRouterCallFinished", final, back, err)
			}
		}
		got, err := st.GetRouterCall(ctx(t), c.RequestID)
		if err != nil || got.State != final || got.ChargedCents != 7 {
			t.Errorf("after refused reopen: %+v (%v), want %s charged 7", got, err, final)
		}
		// A final state may still be rewritten with another final state's facts.
		c.State, c.ChargedCents = final, 7
		if err := st.UpdateRouterCall(ctx(t), c); err != nil {
			t.Errorf("%s → %s: %v", final, final, err)
		}
	}
}

// testRouterTouchClaim: touches keep a live record fresh; a stale one is
// claimed by exactly one of many concurrent claimers; finished records are
// neither touched nor claimed.
func testRouterTouchClaim(t *testing.T, st storage.RouterStore) {
	c := newRouterCall(newID(), newID())
	created, err := st.CreateRouterCall(ctx(t), c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.ClaimStaleRouterCall(ctx(t), c.RequestID, time.Hour); err != nil || ok {
		t.Errorf("claim of a fresh record = %v, %v; want false", ok, err)
	}
	time.Sleep(5 * time.Millisecond)
	if ok, err := st.TouchRouterCall(ctx(t), c.RequestID); err != nil || !ok {
		t.Fatalf("touch of a running record = %v, %v; want true", ok, err)
	}
	got, err := st.GetRouterCall(ctx(t), c.RequestID)
	if err != nil || !got.UpdatedAt.After(created.UpdatedAt) {
		t.Errorf("touch did not move updated_at: %v → %v (%v)", created.UpdatedAt, got.UpdatedAt, err)
	}
	// staleFor is long next to the spread of the concurrent claims (pool
	// connections being opened), so that only the first can find it stale.
	const staleFor = time.Second
	time.Sleep(staleFor + 100*time.Millisecond)
	const n = 8
	var wins atomic.Int32
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := st.ClaimStaleRouterCall(ctx(t), c.RequestID, staleFor)
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			if ok {
				wins.Add(1)
			}
		}()
	}
	wg.Wait()
	if w := wins.Load(); w != 1 {
		t.Errorf("%d concurrent claims of one stale record won, want 1", w)
	}
	c.State = storage.RouterAnswered
	if err := st.UpdateRouterCall(ctx(t), c); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond)
	if ok, err := st.TouchRouterCall(ctx(t), c.RequestID); err != nil || ok {
		t.Errorf("touch of an answered record = %v, %v; want false", ok, err)
	}
	if ok, err := st.ClaimStaleRouterCall(ctx(t), c.RequestID, time.Millisecond); err != nil || ok {
		t.Errorf("claim of an answered record = %v, %v; want false", ok, err)
	}
	if ok, err := st.TouchRouterCall(ctx(t), newID()); err != nil || ok {
		t.Errorf("touch of an unknown record = %v, %v; want false", ok, err)
	}
}
