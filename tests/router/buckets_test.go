package router

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// inputSchema is the test models' OpenAPI input document.
const inputSchema = `{"openapi":"3.1.0","info":{"title":"t","version":"1"},"paths":{"/x":{"post":{"requestBody":{"required":true,
"content":{"application/json":{"schema":{"$ref":"#/components/schemas/In"}}}},"responses":{"200":{"description":"ok"}}}}},
"components":{"schemas":{"In":{"type":"object","required":["prompt"],"properties":{"prompt":{"type":"string","minLength":1},
"num_images":{"type":"integer","minimum":1,"maximum":9},"text":{"type":"string"},"seed":{"type":"integer"}}}}}}`

// peers is one of each partner kind.
type peers struct {
	json, bytes, fal, bfl *partner.Peer
}

func startPeers(t *testing.T) peers {
	return peers{json: partner.NewSyncJSON(t), bytes: partner.NewSyncBytes(t), fal: partner.NewFalQueue(t), bfl: partner.NewBFL(t)}
}

// standardModels maps the peers into a catalog.
func standardModels(p peers) []model {
	return []model{
		{ID: "acme/image", Adapter: "http", Upstream: p.json.URL + "/v1/images/generations", Credential: partner.DefaultSecret,
			Schema: inputSchema, Price: 5, Deadline: "2s", Charges: "yes"},
		{ID: "voice/tts", Adapter: "http", Upstream: p.bytes.URL + "/v1/text-to-speech/v1", Credential: partner.DefaultSecret,
			CredentialHeader: map[string]string{"name": "xi-api-key", "prefix": ""}, Price: 1, Deadline: "2s"},
		{ID: "fal/flux", Adapter: "fal", Upstream: p.fal.URL + "/fal-ai/flux/dev", Credential: partner.DefaultSecret,
			Schema: inputSchema, Price: 3, Deadline: "2s", Poll: "100ms"},
		{ID: "bfl/flux-pro", Adapter: "bfl", Upstream: p.bfl.URL + "/v1/flux-pro-1.1", Credential: partner.DefaultSecret,
			Schema: inputSchema, Price: 4, Deadline: "2s", Poll: "100ms", Entitlement: "beta"},
	}
}

var prompt = []byte(`{"prompt":"a red fox","seed":7}`)

// TestBuckets drives every bucket the router produces against the peers and
// checks status, X-Service-Error-Type, body shape and X-Service-Request-Id.
func TestBuckets(t *testing.T) {
	p := startPeers(t)
	g := startRouter(t, embeddedBackend(), standardModels(p), "")
	beta := token(t, claims{ws: "ws-buckets", entitlements: []string{"beta"}})
	plain := token(t, claims{ws: "ws-buckets"})
	post := func(id, tok string, body []byte, hdr map[string]string) response {
		return call(t, http.MethodPost, g.URL+"/v1/models/"+id, tok, body, hdr)
	}

	t.Run("success passes the native output through", func(t *testing.T) {
		r := post("acme/image", plain, prompt, map[string]string{"X-Forwarded-For": "6.6.6.6", "Cookie": "a=b"})
		if r.Status != 200 || r.Header.Get("X-Service-Error-Type") != "" || !strings.Contains(string(r.Body), `"a red fox"`) {
			t.Fatalf("got %d %s", r.Status, r.Body)
		}
		last := p.json.LastSubmit()
		if got := last.Header.Get("Authorization"); got != "Bearer "+partner.DefaultSecret {
			t.Errorf("partner saw Authorization %q, want the catalog credential", got)
		}
		for _, h := range []string{"X-Forwarded-For", "Cookie"} {
			if v := last.Header.Get(h); v != "" {
				t.Errorf("partner saw client header %s: %q", h, v)
			}
		}
		if string(last.Body) != string(prompt) {
			t.Errorf("body forwarded as %q, want unchanged", last.Body)
		}
		b := post("voice/tts", plain, []byte(`{"text":"hello"}`), nil)
		if b.Status != 200 || b.Header.Get("Content-Type") != "audio/mpeg" || !strings.HasSuffix(string(b.Body), "hello") {
			t.Errorf("bytes passthrough: %d %q %q", b.Status, b.Header.Get("Content-Type"), b.Body)
		}
		f := post("fal/flux", plain, prompt, nil)
		if f.Status != 200 || !strings.Contains(string(f.Body), `"images"`) {
			t.Errorf("fal: %d %s", f.Status, f.Body)
		}
		bf := post("bfl/flux-pro", beta, prompt, nil)
		if bf.Status != 200 || !strings.Contains(string(bf.Body), `"Ready"`) {
			t.Errorf("bfl: %d %s", bf.Status, bf.Body)
		}
	})

	cases := []struct {
		name   string
		setup  func()
		do     func() response
		status int
		bucket string
	}{
		{name: "unauthorized: no token", do: func() response { return call(t, "GET", g.URL+"/v1/models", "", nil, nil) },
			status: 401, bucket: "unauthorized"},
		{name: "unauthorized: expired token", do: func() response {
			return call(t, "GET", g.URL+"/v1/models", token(t, claims{ws: "w", expired: true}), nil, nil)
		}, status: 401, bucket: "unauthorized"},
		{name: "not_enabled", do: func() response {
			return call(t, "GET", g.URL+"/v1/models", token(t, claims{ws: "w", enabled: boolPtr(false)}), nil, nil)
		}, status: 403, bucket: "not_enabled"},
		{name: "forbidden: model outside the entitlements", do: func() response { return post("bfl/flux-pro", plain, prompt, nil) },
			status: 403, bucket: "forbidden"},
		{name: "model_not_found", do: func() response { return post("acme/imag", plain, prompt, nil) },
			status: 404, bucket: "model_not_found"},
		{name: "invalid_input: malformed body", do: func() response { return post("acme/image", plain, []byte(`{"prompt":`), nil) },
			status: 400, bucket: "invalid_input"},
		{name: "invalid_input: schema", do: func() response { return post("acme/image", plain, []byte(`{"num_images":12}`), nil) },
			status: 422, bucket: "invalid_input"},
		{name: "invalid_input: bad key", do: func() response {
			return post("acme/image", plain, prompt, map[string]string{"Idempotency-Key": strings.Repeat("k", 256)})
		}, status: 400, bucket: "invalid_input"},
		{name: "invalid_input: two keys", do: func() response {
			req, _ := http.NewRequest(http.MethodPost, g.URL+"/v1/models/acme/image", bytes.NewReader(prompt))
			req.Header.Set("Authorization", "Bearer "+plain)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Add("Idempotency-Key", "one")
			req.Header.Add("Idempotency-Key", "two")
			resp, err := client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
		}, status: 400, bucket: "invalid_input"},
		{name: "invalid_input: provider 422 passes through", setup: func() { p.fal.SetOptions(partner.WithNoFaults(), partner.WithValidationError(nil)) },
			do: func() response { return post("fal/flux", plain, prompt, nil) }, status: 422, bucket: "invalid_input"},
		{name: "content_policy_violation: sync refusal", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithRefusal()) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "content_policy_violation: success without media", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithEmptyMedia()) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "content_policy_violation: empty audio", setup: func() { p.bytes.SetOptions(partner.WithNoFaults(), partner.WithEmptyMedia()) },
			do: func() response { return post("voice/tts", plain, []byte(`{"text":"x"}`), nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "content_policy_violation: fal refusal", setup: func() { p.fal.SetOptions(partner.WithNoFaults(), partner.WithRefusal()) },
			do: func() response { return post("fal/flux", plain, prompt, nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "content_policy_violation: bfl moderated", setup: func() { p.bfl.SetOptions(partner.WithNoFaults(), partner.WithOutputRefusal()) },
			do: func() response { return post("bfl/flux-pro", beta, prompt, nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "content_policy_violation: bfl ready without sample", setup: func() { p.bfl.SetOptions(partner.WithNoFaults(), partner.WithEmptyMedia()) },
			do: func() response { return post("bfl/flux-pro", beta, prompt, nil) }, status: 400, bucket: "content_policy_violation"},
		{name: "provider_error: 5xx", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithStatus(500)) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 502, bucket: "provider_error"},
		{name: "provider_error: garbage", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithGarbage()) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 502, bucket: "provider_error"},
		{name: "provider_error: bytes cut short", setup: func() { p.bytes.SetOptions(partner.WithNoFaults(), partner.WithGarbage()) },
			do: func() response { return post("voice/tts", plain, []byte(`{"text":"x"}`), nil) }, status: 502, bucket: "provider_error"},
		{name: "provider_error: bfl failed", setup: func() { p.bfl.SetOptions(partner.WithNoFaults(), partner.WithResultStatus(500)) },
			do: func() response { return post("bfl/flux-pro", beta, prompt, nil) }, status: 502, bucket: "provider_error"},
		{name: "provider_timeout: sync 504", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithStatus(504)) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 504, bucket: "provider_timeout"},
		{name: "provider_timeout: fal request_timeout", setup: func() { p.fal.SetOptions(partner.WithNoFaults(), partner.WithResultStatus(504)) },
			do: func() response { return post("fal/flux", plain, prompt, nil) }, status: 504, bucket: "provider_timeout"},
		{name: "deadline_exceeded: http has no Retry-After", setup: func() { p.json.SetOptions(partner.WithNoFaults(), partner.WithHang()) },
			do: func() response { return post("acme/image", plain, prompt, nil) }, status: 504, bucket: "deadline_exceeded"},
		{name: "internal_error", do: func() response {
			// A workspace id over the limiter's 256-byte bound is a router
			// failure, not the caller's: 500 internal_error.
			return post("acme/image", token(t, claims{ws: strings.Repeat("w", 300)}), prompt, nil)
		}, status: 500, bucket: "internal_error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.setup != nil {
				c.setup()
			}
			r := c.do()
			wantBucket(t, c.name, r, c.status, c.bucket)
			if c.bucket == "deadline_exceeded" && r.Header.Get("Retry-After") != "" {
				t.Errorf("http deadline answered Retry-After %q", r.Header.Get("Retry-After"))
			}
			if c.bucket == "model_not_found" && !strings.Contains(string(r.Body), "acme/image") {
				t.Errorf("model_not_found without the close suggestion: %s", r.Body)
			}
			if c.name == "invalid_input: provider 422 passes through" && !strings.Contains(string(r.Body), `"less_than_equal"`) {
				t.Errorf("provider 422 not passed through: %s", r.Body)
			}
		})
	}
	for _, pr := range []*partner.Peer{p.json, p.bytes, p.fal, p.bfl} {
		pr.SetOptions(partner.WithNoFaults())
	}

	t.Run("client_disconnected is recorded", func(t *testing.T) {
		p.json.SetOptions(partner.WithNoFaults(), partner.WithLatency(700*time.Millisecond))
		defer p.json.SetOptions(partner.WithNoFaults())
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		_, err := send(ctx, http.MethodPost, g.URL+"/v1/models/acme/image", plain, prompt, map[string]string{"Idempotency-Key": "gone-1"})
		if err == nil {
			t.Fatal("request did not time out on the client side")
		}
		st := g.routerStore(t)
		var bucket string
		var charged int64
		eventually(t, 10*time.Second, "the record of the abandoned call", func() bool {
			rec, err := st.FindRouterCallByKey(context.Background(), "ws-buckets", "gone-1")
			bucket, charged = rec.Bucket, rec.ChargedCents
			return err == nil && rec.State == "answered"
		})
		if bucket != "client_disconnected" || charged != 5 {
			t.Errorf("record bucket %q charged %d, want client_disconnected charged 5 (the generation completed)", bucket, charged)
		}
	})
}

// TestLimitBuckets covers rate_limited, insufficient_credits and
// service_unavailable, which need their own gateway configuration.
func TestLimitBuckets(t *testing.T) {
	p := startPeers(t)
	models := standardModels(p)
	tok := token(t, claims{ws: "ws-limits"})
	body := prompt

	t.Run("rate_limited", func(t *testing.T) {
		g := startRouter(t, embeddedBackend(), models, "rate minute 1m 2")
		for i := range 2 {
			if r := call(t, "POST", g.URL+"/v1/models/acme/image", tok, body, nil); r.Status != 200 {
				t.Fatalf("call %d: %d %s", i, r.Status, r.Body)
			}
		}
		r := call(t, "POST", g.URL+"/v1/models/acme/image", tok, body, nil)
		wantBucket(t, "third call", r, 429, "rate_limited")
		if ra := r.Header.Get("Retry-After"); ra == "" || ra == "0" {
			t.Errorf("rate_limited without Retry-After (%q)", ra)
		}
		if !strings.Contains(string(r.Body), "minute") {
			t.Errorf("detail does not name the window: %s", r.Body)
		}
	})
	t.Run("insufficient_credits", func(t *testing.T) {
		g := startRouter(t, embeddedBackend(), models, "require_credits")
		r := call(t, "POST", g.URL+"/v1/models/acme/image", tok, body, nil)
		wantBucket(t, "no credits", r, 402, "insufficient_credits")
	})
	t.Run("service_unavailable when Redis is down", func(t *testing.T) {
		b := postgresBackend()
		var proxy *tcpProxy
		down := backend{name: "postgres", global: func(t *testing.T) (string, string, string) {
			body, prefix, dsn := b.global(t)
			u, _ := url.Parse(pgtest.RedisURL(t))
			proxy = startTCPProxy(t, u.Host)
			u.Host = proxy.Addr()
			i := strings.Index(body, "redis ")
			return body[:i] + fmt.Sprintf("redis %q", u.String()), prefix, dsn
		}}
		g := startRouter(t, down, models, "")
		if r := call(t, "POST", g.URL+"/v1/models/acme/image", tok, body, nil); r.Status != 200 {
			t.Fatalf("with Redis up: %d %s", r.Status, r.Body)
		}
		proxy.Down()
		before := p.json.Submissions()
		// Every admission that needs Redis fails closed. The first call
		// comes from another workspace: a call of the same one might come
		// quickly enough to take over the slot the last call is still
		// releasing, which needs no Redis and overshoots nothing (see
		// limits.Redis.handOver); that admission takes the release along,
		// so the workspace's next call needs Redis too.
		r := call(t, "POST", g.URL+"/v1/models/acme/image", token(t, claims{ws: "ws-limits-2"}), body, nil)
		wantBucket(t, "redis down, another workspace", r, 503, "service_unavailable")
		r = call(t, "POST", g.URL+"/v1/models/acme/image", tok, body, nil)
		wantBucket(t, "redis down, the same workspace", r, 503, "service_unavailable")
		if n := p.json.Submissions() - before; n != 0 {
			t.Errorf("the partner got %d submissions while limits were unavailable", n)
		}
	})
}
