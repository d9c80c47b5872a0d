package router

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestDeadlineCollectsWithoutResubmitting: a fal or BFL generation that
// outlives the router's deadline answers 504 deadline_exceeded with
// Retry-After; retrying with the same key collects that generation (the
// peer counts one submission); on http the 504 has no Retry-After and a
// retry with its key runs the call again.
func TestDeadlineCollectsWithoutResubmitting(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			fal := partner.NewFalQueue(t, partner.WithLatency(2500*time.Millisecond))
			bfl := partner.NewBFL(t, partner.WithLatency(2500*time.Millisecond))
			sync := partner.NewSyncJSON(t, partner.WithLatency(3*time.Second))
			models := []model{
				{ID: "fal/slow", Adapter: "fal", Upstream: fal.URL + "/fal-ai/flux/dev", Credential: partner.DefaultSecret, Price: 3, Deadline: "1s", Poll: "100ms"},
				{ID: "bfl/slow", Adapter: "bfl", Upstream: bfl.URL + "/v1/flux-pro", Credential: partner.DefaultSecret, Price: 4, Deadline: "1s", Poll: "100ms"},
				{ID: "acme/slow", Adapter: "http", Upstream: sync.URL, Credential: partner.DefaultSecret, Price: 5, Deadline: "1s"},
			}
			g := startRouter(t, b, models, "")
			ws := "ws-deadline-" + b.name
			tok := token(t, claims{ws: ws})
			st := g.routerStore(t)
			for _, c := range []struct {
				id   string
				peer *partner.Peer
				want string
			}{{"fal/slow", fal, `"images"`}, {"bfl/slow", bfl, `"Ready"`}} {
				t.Run(c.id, func(t *testing.T) {
					key := map[string]string{"Idempotency-Key": "collect-" + c.id}
					first := call(t, "POST", g.URL+"/v1/models/"+c.id, tok, prompt, key)
					wantBucket(t, "first", first, 504, "deadline_exceeded")
					if first.Header.Get("Retry-After") != "1" {
						t.Errorf("504 Retry-After %q, want 1 (the 100ms poll interval rounded up)", first.Header.Get("Retry-After"))
					}
					var last response
					for range 10 {
						last = call(t, "POST", g.URL+"/v1/models/"+c.id, tok, prompt, key)
						if last.Status != 504 {
							break
						}
						wantBucket(t, "retry still running", last, 504, "deadline_exceeded")
						if last.Header.Get("Retry-After") == "" {
							t.Fatalf("retry 504 without Retry-After")
						}
					}
					if last.Status != 200 || !strings.Contains(string(last.Body), c.want) {
						t.Fatalf("collect: %d %s", last.Status, last.Body)
					}
					if last.Header.Get("Idempotent-Replayed") != "true" {
						t.Errorf("collected answer not marked Idempotent-Replayed")
					}
					if n := c.peer.Submissions(); n != 1 {
						t.Errorf("peer saw %d submissions, want 1", n)
					}
					rec, err := st.FindRouterCallByKey(context.Background(), ws, key["Idempotency-Key"])
					if err != nil || rec.RequestID != first.Header.Get("X-Service-Request-Id") || rec.State != "answered" ||
						rec.ChargedCents == 0 || len(rec.ProviderHandle) == 0 {
						t.Errorf("usage record %+v (%v): want the first request's id, answered, charged, with the handle", rec, err)
					}
				})
			}
			t.Run("http has no Retry-After, and its retry runs again", func(t *testing.T) {
				key := map[string]string{"Idempotency-Key": "http-slow"}
				before := sync.Submissions()
				for _, what := range []string{"http deadline", "same-key retry"} {
					r := call(t, "POST", g.URL+"/v1/models/acme/slow", tok, prompt, key)
					wantBucket(t, what, r, 504, "deadline_exceeded")
					if ra := r.Header.Get("Retry-After"); ra != "" {
						t.Errorf("%s: the 504 carries Retry-After %q with nothing to collect", what, ra)
					}
				}
				if n := sync.Submissions() - before; n != 2 {
					t.Errorf("the partner saw %d requests, want 2 (the retry is not refused with 409)", n)
				}
			})
		})
	}
}

// TestIdempotencyKey covers replay, conflicts and key release.
func TestIdempotencyKey(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			peer := partner.NewSyncJSON(t)
			options := ""
			if b.name == "postgres" {
				options = "require_credits"
			}
			models := []model{{ID: "acme/image", Adapter: "http", Upstream: peer.URL, Credential: partner.DefaultSecret, Price: 7, Deadline: "10s", Schema: inputSchema}}
			g := startRouter(t, b, models, options)
			ws := "ws-idem-" + b.name
			tok := token(t, claims{ws: ws})
			url := g.URL + "/v1/models/acme/image"
			if b.name == "postgres" {
				if _, err := g.ledger(t).AddCredits(context.Background(), ws, 100); err != nil {
					t.Fatal(err)
				}
			}

			first := call(t, "POST", url, tok, prompt, map[string]string{"Idempotency-Key": "replay-1"})
			if first.Status != 200 || first.Header.Get("Idempotent-Replayed") != "" {
				t.Fatalf("first: %d replayed=%q %s", first.Status, first.Header.Get("Idempotent-Replayed"), first.Body)
			}
			again := call(t, "POST", url, tok, prompt, map[string]string{"Idempotency-Key": "replay-1"})
			if again.Status != 200 || again.Header.Get("Idempotent-Replayed") != "true" || string(again.Body) != string(first.Body) {
				t.Errorf("replay: %d replayed=%q same body=%v", again.Status, again.Header.Get("Idempotent-Replayed"), string(again.Body) == string(first.Body))
			}
			if again.Header.Get("X-Service-Request-Id") == first.Header.Get("X-Service-Request-Id") {
				t.Errorf("the replay reused the original request id")
			}
			if n := peer.Submissions(); n != 1 {
				t.Errorf("peer saw %d submissions, want 1", n)
			}
			if b.name == "postgres" {
				// The settle lands just after the answer; then the balance must
				// stay at 93: one charge of 7 for the call and its replay.
				l := g.ledger(t)
				eventually(t, 5*time.Second, "the charge", func() bool {
					bal, err := l.Balance(context.Background(), ws)
					return err == nil && bal == 93
				})
				time.Sleep(100 * time.Millisecond)
				if bal, err := l.Balance(context.Background(), ws); err != nil || bal != 93 {
					t.Errorf("balance after a call and its replay = %d (%v), want 93: charged once", bal, err)
				}
			}

			other := call(t, "POST", url, tok, []byte(`{"prompt":"something else"}`), map[string]string{"Idempotency-Key": "replay-1"})
			wantBucket(t, "same key, different request", other, 409, "invalid_input")
			if other.Header.Get("Retry-After") != "" {
				t.Errorf("key mismatch carries Retry-After")
			}

			// Validation refusals never claim the key.
			bad := call(t, "POST", url, tok, []byte(`{"num_images":99}`), map[string]string{"Idempotency-Key": "fresh-1"})
			wantBucket(t, "schema refusal", bad, 422, "invalid_input")
			good := call(t, "POST", url, tok, prompt, map[string]string{"Idempotency-Key": "fresh-1"})
			if good.Status != 200 || good.Header.Get("Idempotent-Replayed") != "" {
				t.Errorf("key after a validation refusal: %d %s", good.Status, good.Body)
			}

			peer.SetOptions(partner.WithLatency(1500 * time.Millisecond))
			done := make(chan response, 1)
			go func() {
				r, _ := send(context.Background(), http.MethodPost, url, tok, prompt, map[string]string{"Idempotency-Key": "running-1"})
				done <- r
			}()
			eventually(t, 5*time.Second, "the call at the peer", func() bool { return peer.OpenRequests() == 1 })
			running := call(t, "POST", url, tok, prompt, map[string]string{"Idempotency-Key": "running-1"})
			wantBucket(t, "same key still running", running, 409, "concurrency_limit_exceeded")
			if running.Header.Get("Retry-After") == "" {
				t.Errorf("409 concurrency_limit_exceeded without Retry-After")
			}
			if r := <-done; r.Status != 200 {
				t.Errorf("the running call ended %d", r.Status)
			}
			peer.SetOptions(partner.WithNoFaults())

			if b.name == "postgres" {
				// A refusal before dispatch (no credits) releases the key.
				poor := "ws-poor"
				ptok := token(t, claims{ws: poor})
				r := call(t, "POST", url, ptok, prompt, map[string]string{"Idempotency-Key": "release-1"})
				wantBucket(t, "no credits", r, 402, "insufficient_credits")
				if _, err := g.ledger(t).AddCredits(context.Background(), poor, 50); err != nil {
					t.Fatal(err)
				}
				r = call(t, "POST", url, ptok, prompt, map[string]string{"Idempotency-Key": "release-1"})
				if r.Status != 200 || r.Header.Get("Idempotent-Replayed") != "" {
					t.Errorf("retry after the refusal: %d replayed=%q %s", r.Status, r.Header.Get("Idempotent-Replayed"), r.Body)
				}
			}
		})
	}
}
