package router

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// restartOn starts another gateway on g's store, limiter prefix and catalog
// (a fresh process, as after a crash or on another machine).
func (g *routerGateway) restartOn(t *testing.T) *routerGateway {
	t.Helper()
	g2 := *g
	g2.adminPort = gateway.FreePort(t)
	client.CloseIdleConnections()
	g2.Gateway = gateway.Start(t, g2.caddyfile(), gateway.Options{Dir: t.TempDir()})
	return &g2
}

// TestKilledGatewayGenerationIsCollected: a keyed fal call whose gateway is
// killed (kill -9) mid-call is collected by a same-key retry on another
// gateway sharing Postgres and Redis: the handle was stored as soon as fal
// accepted, the dead gateway stopped touching the record, and the retry
// takes the generation over, answers it without a second submission and
// debits its price once.
func TestKilledGatewayGenerationIsCollected(t *testing.T) {
	fal := partner.NewFalQueue(t, partner.WithLatency(3*time.Second))
	models := []model{{ID: "fal/crash", Adapter: "fal", Upstream: fal.URL + "/fal-ai/flux/dev",
		Credential: partner.DefaultSecret, Price: 3, Deadline: "20s", Poll: "100ms"}}
	g1 := startRouter(t, postgresBackend(), models, "require_credits\n\t\t\ttakeover_after 1s")
	ws := "ws-crash"
	tok := token(t, claims{ws: ws})
	l := g1.ledger(t)
	if _, err := l.AddCredits(context.Background(), ws, 100); err != nil {
		t.Fatal(err)
	}
	st := g1.routerStore(t)
	key := map[string]string{"Idempotency-Key": "crash-1"}
	url := "/v1/models/fal/crash"
	go func() { _, _ = send(context.Background(), http.MethodPost, g1.URL+url, tok, prompt, key) }()

	var running storage.RouterCall
	eventually(t, 10*time.Second, "the accepted generation's handle in the record", func() bool {
		rec, err := st.FindRouterCallByKey(context.Background(), ws, "crash-1")
		running = rec
		return err == nil && len(rec.ProviderHandle) > 0
	})
	if running.State != storage.RouterRunning {
		t.Errorf("record state %q while the call runs, want running", running.State)
	}
	g1.Kill()

	g2 := g1.restartOn(t)
	var last response
	for range 40 {
		last = call(t, http.MethodPost, g2.URL+url, tok, prompt, key)
		if last.Status == http.StatusOK {
			break
		}
		switch last.Header.Get("X-Service-Error-Type") {
		case "concurrency_limit_exceeded", "deadline_exceeded":
		default:
			t.Fatalf("retry: %d %s", last.Status, last.Body)
		}
		time.Sleep(250 * time.Millisecond)
	}
	if last.Status != http.StatusOK || !strings.Contains(string(last.Body), `"images"`) {
		t.Fatalf("collect after the crash: %d %s", last.Status, last.Body)
	}
	if last.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("collected answer not marked Idempotent-Replayed")
	}
	if n := fal.Submissions(); n != 1 {
		t.Errorf("peer saw %d submissions, want 1", n)
	}
	rec, err := st.GetRouterCall(context.Background(), running.RequestID)
	if err != nil || rec.State != storage.RouterAnswered || rec.ChargedCents != 3 {
		t.Errorf("record after takeover %+v (%v): want answered, charged 3", rec, err)
	}
	eventually(t, 5*time.Second, "the takeover's debit", func() bool {
		bal, err := l.Balance(context.Background(), ws)
		return err == nil && bal == 97
	})
	// A further retry replays; nothing is charged again.
	again := call(t, http.MethodPost, g2.URL+url, tok, prompt, key)
	if again.Status != http.StatusOK || again.Header.Get("Idempotent-Replayed") != "true" {
		t.Errorf("replay: %d %s", again.Status, again.Body)
	}
	if bal, err := l.Balance(context.Background(), ws); err != nil || bal != 97 {
		t.Errorf("balance %d (%v) after the replay, want 97", bal, err)
	}
}

// TestKeylessDeadlineCompletedGenerationIsCharged: a keyless fal call hits
// the router's deadline after the generation completed but before a poll saw
// it. The cancel answers ALREADY_COMPLETED; the router must fetch the result
// and charge it (a completed generation is billed regardless of delivery).
func TestKeylessDeadlineCompletedGenerationIsCharged(t *testing.T) {
	fal := partner.NewFalQueue(t, partner.WithLatency(200*time.Millisecond))
	models := []model{{ID: "fal/late", Adapter: "fal", Upstream: fal.URL + "/fal-ai/flux/dev",
		Credential: partner.DefaultSecret, Price: 3, Deadline: "1s", Poll: "3s"}}
	g := startRouter(t, postgresBackend(), models, "require_credits")
	ws := "ws-late"
	tok := token(t, claims{ws: ws})
	l := g.ledger(t)
	if _, err := l.AddCredits(context.Background(), ws, 100); err != nil {
		t.Fatal(err)
	}
	r := call(t, http.MethodPost, g.URL+"/v1/models/fal/late", tok, prompt, nil)
	wantBucket(t, "keyless deadline", r, http.StatusGatewayTimeout, "deadline_exceeded")
	st := g.routerStore(t)
	id := r.Header.Get("X-Service-Request-Id")
	var rec storage.RouterCall
	eventually(t, 15*time.Second, "the keyless call's final record", func() bool {
		var err error
		rec, err = st.GetRouterCall(context.Background(), id)
		return err == nil && rec.FinishedAt != nil
	})
	if rec.ChargedCents != 3 {
		h, _ := json.Marshal(rec)
		t.Errorf("record %s: charged %d, want 3", h, rec.ChargedCents)
	}
	eventually(t, 5*time.Second, "the debit", func() bool {
		bal, err := l.Balance(context.Background(), ws)
		return err == nil && bal == 97
	})
	if n := fal.Submissions(); n != 1 {
		t.Errorf("peer saw %d submissions, want 1", n)
	}
}
