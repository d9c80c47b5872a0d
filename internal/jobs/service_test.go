package jobs

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/idem"
	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/memclaim"
)

func TestSubmitQueuesAndPublishes(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	a := e.addAsset(t, "acct", "in/photo.png", pngBytes)
	queued := e.hub.SubscribeQueued()
	defer queued.Cancel()

	tests := []struct {
		name  string
		graph map[string]node
	}{
		{"by file name", invertGraph("in/photo.png")},
		{"by asset id", invertGraph(assetRef(a.ID))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := time.Now()
			body := submitBody(t, tt.graph)
			j, err := e.svc.Submit(ctx, "acct", body)
			if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			if j.Status != storage.JobQueued || j.AccountID != "acct" || j.Pool != testPool {
				t.Fatalf("job = %+v", j)
			}
			if _, err := uuid.Parse(j.ID); err != nil {
				t.Fatalf("job id %q is not a UUID", j.ID)
			}
			if j.ExpiresAt.Before(before.Add(time.Hour-time.Minute)) || j.ExpiresAt.After(time.Now().Add(time.Hour)) {
				t.Fatalf("ExpiresAt %v is not now + retention", j.ExpiresAt)
			}
			var stored, sent map[string]any
			_ = json.Unmarshal(j.Workflow, &stored)
			_ = json.Unmarshal(body, &sent)
			if got, want := mustJSON(t, stored), mustJSON(t, sent["workflow"]); got != want {
				t.Fatalf("stored workflow %s, want %s", got, want)
			}
			ev := nextEvent(t, queued, func(ev bus.Event) bool { return ev.JobID == j.ID })
			if ev.Kind != "queued" || ev.Pool != testPool {
				t.Fatalf("queued event = %+v", ev)
			}
			got, err := e.svc.Get(ctx, "acct", j.ID)
			if err != nil || got.Status != storage.JobQueued {
				t.Fatalf("Get = %+v, %v", got, err)
			}
			pos, err := e.svc.QueuePosition(ctx, got)
			if err != nil || pos == nil || *pos < 1 {
				t.Fatalf("QueuePosition = %v, %v", pos, err)
			}
		})
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestSubmitKeepsExtraDataInMemoryOnly(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	body := []byte(`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}},` +
		`"2":{"class_type":"SaveImage","inputs":{"images":["1",0],"filename_prefix":"x"}}},` +
		`"extra_data":{"api_key_comfy_org":"comfyui-secret-123"}}`)
	j, err := e.svc.Submit(ctx, "acct", body)
	if err != nil {
		t.Fatalf("Submit: %v", err)
	}
	if got := e.svc.ExtraData.Get(j.ID); got["api_key_comfy_org"] != "comfyui-secret-123" {
		t.Fatalf("extra_data not held for the dispatcher: %v", got)
	}
	stored, err := e.store.GetJob(ctx, "acct", j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if b := string(stored.Workflow); b == "" || strings.Contains(b, "comfyui-secret-123") || strings.Contains(b, "extra_data") {
		t.Fatalf("stored workflow holds extra_data: %s", b)
	}
}

func TestSubmitRefusalsClaimNothing(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	theirs := e.addAsset(t, "other-acct", "theirs.png", pngBytes)
	e.addAsset(t, "other-acct", "only-theirs.png", pngBytes)

	tests := []struct {
		name    string
		body    []byte
		status  int
		code    string
		missing string
	}{
		{"missing asset by name", submitBody(t, invertGraph("nope.png")), 422, "missing_asset", "nope.png"},
		{"other account's file name", submitBody(t, invertGraph("only-theirs.png")), 422, "missing_asset", "only-theirs.png"},
		{"missing asset by id", submitBody(t, invertGraph(assetRef("7d3c2b8e-1f4a-4b6c-9d0e-123456789abc"))), 422, "missing_asset", "7d3c2b8e-1f4a-4b6c-9d0e-123456789abc"},
		{"other account's asset id", submitBody(t, invertGraph(assetRef(theirs.ID))), 422, "missing_asset", theirs.ID},
		{"asset id not a uuid", submitBody(t, invertGraph(assetRef("../../x"))), 422, "missing_asset", "../../x"},
		{"unknown node class", submitBody(t, map[string]node{"1": {"NoSuchNode", map[string]any{}}}), 422, "invalid_workflow", ""},
		{"no output node", []byte(`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}}}}`), 422, "invalid_workflow", ""},
		{"reserved member", []byte(`{"workflow":{},"webhook_url":"https://x"}`), 422, "invalid_workflow", ""},
		{"ui format", []byte(`{"nodes":[],"links":[]}`), 422, "workflow_format_ui", ""},
		{"not json", []byte(`workflow=1`), 400, "invalid_request", ""},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			claims := memclaim.New()
			key := "key-" + tt.name
			cctx := idem.WithClaim(ctx, idem.New(claims, "acct", key, 0))
			queued := e.hub.SubscribeQueued()
			defer queued.Cancel()

			_, err := e.svc.Submit(cctx, "acct", tt.body)
			ae := wantAPIErr(t, err, tt.status, tt.code)
			if tt.missing != "" {
				missing, _ := ae.Details["missing"].([]string)
				if !slices.Contains(missing, tt.missing) {
					t.Fatalf("details.missing = %v, want %q", ae.Details["missing"], tt.missing)
				}
				if _, ok := ae.Details["node_errors"]; !ok {
					t.Fatalf("details lack node_errors: %v", ae.Details)
				}
			}
			if ok, _ := claims.Claim(ctx, "acct", key, time.Minute); !ok {
				t.Fatal("a refused submit claimed the idempotency key")
			}
			noEvent(t, queued)
			list, _, err := e.svc.List(ctx, "acct", storage.JobQuery{Limit: 100})
			if err != nil || len(list) != 0 {
				t.Fatalf("refusal %d left jobs: %d, %v", i, len(list), err)
			}
		})
	}
}

func TestSubmitClaimsKeyOnSuccess(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	e.addAsset(t, "acct", "a.png", pngBytes)
	claims := memclaim.New()
	cctx := idem.WithClaim(ctx, idem.New(claims, "acct", "k", 0))
	if _, err := e.svc.Submit(cctx, "acct", submitBody(t, invertGraph("a.png"))); err != nil {
		t.Fatal(err)
	}
	// A concurrent duplicate is refused by the claim.
	dup := idem.WithClaim(ctx, idem.New(claims, "acct", "k", 0))
	_, err := e.svc.Submit(dup, "acct", submitBody(t, invertGraph("a.png")))
	wantAPIErr(t, err, 422, "idempotency_key_reuse")
	// With the claim store lost, the database backstop still refuses.
	lost := idem.WithClaim(ctx, idem.New(memclaim.New(), "acct", "k", 0))
	_, err = e.svc.Submit(lost, "acct", submitBody(t, invertGraph("a.png")))
	wantAPIErr(t, err, 422, "idempotency_key_reuse")
	list, _, _ := e.svc.List(ctx, "acct", storage.JobQuery{Limit: 100})
	if len(list) != 1 {
		t.Fatalf("%d jobs after duplicates, want 1", len(list))
	}
}

func TestSubmitQueueFull(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	e.svc.Config.MaxQueued = 1
	_, pngBytes := testPNG(t)
	e.addAsset(t, "acct", "a.png", pngBytes)
	body := submitBody(t, invertGraph("a.png"))
	if _, err := e.svc.Submit(ctx, "acct", body); err != nil {
		t.Fatalf("first Submit: %v", err)
	}
	claims := memclaim.New()
	c := idem.New(claims, "acct", "full-key", 0)
	_, err := e.svc.Submit(idem.WithClaim(ctx, c), "acct", body)
	ae := wantAPIErr(t, err, http.StatusTooManyRequests, "queue_full")
	if ae.RetryAfter != QueueFullRetryAfter || ae.RetryAfter <= 0 {
		t.Fatalf("RetryAfter = %d", ae.RetryAfter)
	}
	if ae.Details["bound"] != storage.BoundMaxQueued || ae.Details["limit"] != 1 {
		t.Errorf("details = %v, want bound max_queued, limit 1", ae.Details)
	}
	// Another account's first job still gets in (fair admission, up to
	// the ceiling of 2 x max_queued); then the pool is at its ceiling.
	e.addAsset(t, "other", "a.png", pngBytes)
	if _, err := e.svc.Submit(ctx, "other", body); err != nil {
		t.Fatalf("another account's first job on the full pool: %v", err)
	}
	_, err2 := e.svc.Submit(ctx, "other", body)
	if ae := wantAPIErr(t, err2, http.StatusTooManyRequests, "queue_full"); ae.Details["bound"] != storage.BoundCeiling || ae.Details["limit"] != 2 {
		t.Errorf("at the ceiling: details = %v, want bound ceiling, limit 2", ae.Details)
	}
	// queue_full is a definitive refusal: settling it frees the key.
	if !idem.Definitive(err) {
		t.Fatal("queue_full is not definitive")
	}
	c.Settle(ctx, err)
	if ok, _ := claims.Claim(ctx, "acct", "full-key", time.Minute); !ok {
		t.Fatal("queue_full kept the idempotency key")
	}
}

func TestCancel(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	j, sub := e.submitWatchedInvert(t)

	got, err := e.svc.Cancel(ctx, "acct", j.ID)
	if err != nil || got.Status != storage.JobCanceled {
		t.Fatalf("Cancel queued = %+v, %v; want canceled", got, err)
	}
	ev := nextEvent(t, sub, func(bus.Event) bool { return true })
	if ev.Kind != "status" || statusOf(t, ev) != storage.JobCanceled {
		t.Fatalf("event = %+v", ev)
	}
	if pos, err := e.svc.QueuePosition(ctx, got); err != nil || pos != nil {
		t.Fatalf("QueuePosition of canceled = %v, %v", pos, err)
	}
	// Cancel of a terminal job returns it unchanged and publishes nothing.
	again, err := e.svc.Cancel(ctx, "acct", j.ID)
	if err != nil || again.Status != storage.JobCanceled {
		t.Fatalf("second Cancel = %+v, %v", again, err)
	}
	noEvent(t, sub)

	for name, tc := range map[string]struct{ account, id string }{
		"other account": {"other", j.ID},
		"unknown":       {"acct", uuid.NewString()},
		"not a uuid":    {"acct", "nope"},
	} {
		_, err := e.svc.Cancel(ctx, tc.account, tc.id)
		if err == nil {
			t.Fatalf("%s: Cancel succeeded", name)
		}
		wantAPIErr(t, err, 404, "not_found")
		_, err = e.svc.Get(ctx, tc.account, tc.id)
		wantAPIErr(t, err, 404, "not_found")
	}
}

// positionCountingStore counts QueuePosition queries.
type positionCountingStore struct {
	Store
	queries int
}

func (p *positionCountingStore) QueuePosition(ctx context.Context, id string) (int, error) {
	p.queries++
	return p.Store.QueuePosition(ctx, id)
}

// A position read with the job (CreateJob, GetJob) is used as it stands; a
// queued job read without one is looked up.
func TestQueuePositionReadWithJob(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ps := &positionCountingStore{Store: e.store}
	e.svc.Store = ps
	body := []byte(`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}},` +
		`"2":{"class_type":"SaveImage","inputs":{"images":["1",0],"filename_prefix":"x"}}}}`)
	var jobs []storage.Job
	for i := range 3 {
		j, err := e.svc.Submit(ctx, "acct", body)
		if err != nil {
			t.Fatal(err)
		}
		if pos, err := e.svc.QueuePosition(ctx, j); err != nil || pos == nil || *pos != i+1 {
			t.Fatalf("QueuePosition of submit %d = %v, %v; want %d", i, pos, err, i+1)
		}
		jobs = append(jobs, j)
	}
	got, err := e.svc.Get(ctx, "acct", jobs[1].ID)
	if err != nil {
		t.Fatal(err)
	}
	if pos, err := e.svc.QueuePosition(ctx, got); err != nil || pos == nil || *pos != 2 {
		t.Fatalf("QueuePosition of a read job = %v, %v; want 2", pos, err)
	}
	if ps.queries != 0 {
		t.Fatalf("%d QueuePosition queries for jobs read with their position, want 0", ps.queries)
	}
	unread := jobs[2]
	unread.QueuePosition = 0
	if pos, err := e.svc.QueuePosition(ctx, unread); err != nil || pos == nil || *pos != 3 || ps.queries != 1 {
		t.Fatalf("QueuePosition of a job read without one = %v, %v after %d queries; want 3 after 1", pos, err, ps.queries)
	}
}
