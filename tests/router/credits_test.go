package router

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestRouterAndJobsShareOneBalance (issue 14, acceptance 3): one gateway
// serves priced jobs (/api/v2, account "acme") and the model router with
// require_credits (JWT workspace "acme"); both draw from acme's one ledger.
// A call is refused with 402 once the job's reservation leaves too little,
// passes once the job's settlement gives the unused part back, and the
// ledger holds both kinds of entries and sums to the balance.
func TestRouterAndJobsShareOneBalance(t *testing.T) {
	for _, b := range backends() {
		t.Run(b.name, func(t *testing.T) {
			peer := partner.NewSyncJSON(t)
			dir := t.TempDir()
			catalog := filepath.Join(dir, "catalog.json")
			if err := os.WriteFile(catalog, catalogJSON(t, []model{{ID: "acme/image", Adapter: "http", Upstream: peer.URL,
				Credential: partner.DefaultSecret, Price: 7, Deadline: "10s"}}), 0o600); err != nil {
				t.Fatal(err)
			}
			global, prefix, dsn := b.global(t)
			redisPrefix := ""
			if prefix != "" {
				redisPrefix = "redis_prefix " + prefix
			}
			g := &routerGateway{dsn: dsn, backend: b.name}
			g.Gateway = gateway.Start(t, `{
	admin off
	grace_period 1s
	comfygate {
		`+global+`
		pool builtin builtin {
			concurrency 1
			price {
				per_job 5
			}
			max_charge 20
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	@router path /v1/models /v1/models/*
	route @router {
		error_envelope router
		comfy_auth jwt {
			key HS256 secret `+jwtSecret+`
		}
		model_router {
			catalog `+catalog+`
			public_base https://router.test
			allow_insecure_upstreams
			require_credits
			`+redisPrefix+`
		}
	}
	route {
		error_envelope
		comfy_auth none acme
		idempotency
		comfy_jobs
		error "not found" 404
	}
}
`, gateway.Options{Dir: dir})
			ctx := context.Background()
			l := g.ledger(t)
			if _, err := l.AddCredits(ctx, "acme", 30); err != nil {
				t.Fatal(err)
			}
			tok := token(t, claims{ws: "acme"})
			callURL := g.URL + "/v1/models/acme/image"

			// A slow job reserves 20 of the 30: a 7-credit call no longer fits.
			job := submitJob(t, g.URL)
			if bal, err := l.Balance(ctx, "acme"); err != nil || bal != 10 {
				t.Fatalf("balance after the job's reservation = %d, %v; want 10", bal, err)
			}
			if r := call(t, http.MethodPost, callURL, tok, prompt, nil); r.Status != 200 {
				t.Fatalf("first call: %d %s", r.Status, r.Body)
			}
			if bal, _ := l.Balance(ctx, "acme"); bal != 3 {
				t.Fatalf("balance after a 7-credit call = %d, want 3", bal)
			}
			wantBucket(t, "call over the balance", call(t, http.MethodPost, callURL, tok, prompt, nil), 402, "insufficient_credits")

			// The job ends, charged 5 of its 20: 15 come back, a call fits again.
			done := gateway.WaitJob(t, g.URL, job, 120*time.Second, gateway.Terminal)
			if done["status"] != "succeeded" || fmt.Sprint(done["cost"]) != "map[credits:5 reserved:20]" {
				t.Fatalf("job ended %v with cost %v", done["status"], done["cost"])
			}
			if r := call(t, http.MethodPost, callURL, tok, prompt, nil); r.Status != 200 {
				t.Fatalf("call after the job's settlement: %d %s", r.Status, r.Body)
			}
			bal, err := l.Balance(ctx, "acme")
			if err != nil || bal != 30-20+15-7-7 {
				t.Fatalf("final balance %d (%v), want 11", bal, err)
			}
			entries, err := l.st.CreditLedger(ctx, "acme", time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			kinds := map[string]int{}
			for _, e := range entries {
				switch {
				case e.JobID == job:
					kinds["job "+e.Kind]++
				case e.CallID != "":
					kinds["call "+e.Kind]++
				}
			}
			want := map[string]int{"job reservation": 1, "job settlement": 1, "call reservation": 2, "call settlement": 2}
			if fmt.Sprint(kinds) != fmt.Sprint(want) {
				t.Fatalf("ledger entries by kind %v, want %v", kinds, want)
			}
		})
	}
}

// submitJob submits a job that runs for a few seconds and returns its id.
func submitJob(t *testing.T, base string) string {
	t.Helper()
	wf := map[string]any{"1": map[string]any{"class_type": "EmptyImage",
		"inputs": map[string]any{"width": 2048, "height": 2048, "batch_size": 1, "color": 0}}}
	prev := "1"
	for i := 2; i <= 4; i++ {
		id := fmt.Sprint(i)
		wf[id] = map[string]any{"class_type": "ImageBlur", "inputs": map[string]any{"image": []any{prev, 0}, "blur_radius": 31, "sigma": 3}}
		prev = id
	}
	wf["9"] = map[string]any{"class_type": "SaveImage", "inputs": map[string]any{"filename_prefix": "s", "images": []any{prev, 0}}}
	body, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.Do(t, http.MethodPost, base+"/api/v2/jobs", bytes.NewReader(body), map[string]string{"Content-Type": "application/json"})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}
