package router

import (
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/otlp"
	"github.com/comfygate/comfygate/tests/peers/partner"
)

// TestRouterCallTrace (issue 30, acceptance 2): with tracing on, a router
// call's trace is router.call with the router.admission and router.settle
// phases as its events (each with its duration) and a router.partner_request
// child span (whose traceparent the partner received); a call refused at
// admission carries its bucket on its span and its admission event.
func TestRouterCallTrace(t *testing.T) {
	t.Parallel()
	peer := partner.NewSyncJSON(t)
	g, recv := tracedRouter(t, []model{syncModel("acme/image", peer)}, "rate minute 1m 1")
	tok := token(t, claims{ws: "ws-trace"})

	r := call(t, "POST", g.URL+"/v1/models/acme/image", tok, prompt, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("call: %d %s", r.Status, r.Body)
	}
	okID := r.Header.Get("X-Service-Request-Id")
	refused := call(t, "POST", g.URL+"/v1/models/acme/image", tok, prompt, nil)
	wantBucket(t, "second call in the minute", refused, http.StatusTooManyRequests, "rate_limited")
	refusedID := refused.Header.Get("X-Service-Request-Id")

	spans := recv.Wait(t, 30*time.Second, func(spans []otlp.Span) bool {
		ok, found := callOf(spans, okID)
		_, found2 := callOf(spans, refusedID)
		tr := otlp.Trace(spans, ok.TraceID)
		return found && found2 && len(otlp.Named(tr, "router.partner_request")) > 0
	})

	ok, _ := callOf(spans, okID)
	tr := otlp.Trace(spans, ok.TraceID)
	t.Logf("answered call's trace:\n%s", otlp.Dump(tr))
	var events []string
	for _, e := range ok.Events {
		events = append(events, e.Name)
		if e.Attrs["comfygate.phase.duration_ms"] == "" {
			t.Errorf("event %s has no duration", e.Name)
		}
	}
	if strings.Join(events, ",") != "router.admission,router.settle" {
		t.Errorf("router.call's events are %v, want router.admission, router.settle", events)
	}
	if s := ok.Events[len(ok.Events)-1]; s.Attrs["comfygate.credits"] != "5" {
		t.Errorf("router.settle event attributes %v, want 5 credits", s.Attrs)
	}
	pr := otlp.Named(tr, "router.partner_request")[0]
	if pr.ParentID != ok.SpanID {
		t.Errorf("router.partner_request is not a child of router.call")
	}
	for _, s := range []otlp.Span{ok, pr} {
		if s.Error || s.Attrs["error.type"] != "" {
			t.Errorf("the answered call's %s is failed: error.type %q", s.Name, s.Attrs["error.type"])
		}
	}
	if pr.Attrs["http.request.method"] != "POST" || pr.Attrs["http.response.status_code"] != "200" ||
		pr.Attrs["gen_ai.request.model"] != "acme/image" {
		t.Errorf("router.partner_request attributes: %v", pr.Attrs)
	}
	for _, s := range tr {
		for k, v := range s.Attrs {
			if v == partner.DefaultSecret || v == string(prompt) || v == tok {
				t.Errorf("span %s attribute %s carries a secret or the prompt", s.Name, k)
			}
		}
	}
	wantTP := "00-" + pr.TraceID + "-" + pr.SpanID + "-01"
	if got := peer.LastSubmit().Header.Get("traceparent"); got != wantTP {
		t.Errorf("the partner received traceparent %q, want %q (router.partner_request's)", got, wantTP)
	}

	rc, _ := callOf(spans, refusedID)
	rtr := otlp.Trace(spans, rc.TraceID)
	t.Logf("refused call's trace:\n%s", otlp.Dump(rtr))
	if rc.Attrs["comfygate.router.bucket"] != "rate_limited" || !rc.Error || rc.Attrs["error.type"] != "rate_limited" {
		t.Errorf("refused router.call: error %v, attributes %v; want a failed span of bucket and error.type rate_limited", rc.Error, rc.Attrs)
	}
	if len(rc.Events) != 1 || rc.Events[0].Name != "router.admission" || rc.Events[0].Attrs["comfygate.router.bucket"] != "rate_limited" {
		t.Errorf("refused call's events: %+v, want router.admission with bucket rate_limited", rc.Events)
	}
	if n := len(otlp.Named(rtr, "router.partner_request")); n != 0 {
		t.Errorf("the refused call has %d partner requests", n)
	}
}

// TestRouterFailedCallTrace (issue 40, acceptance 2): a call the partner
// answered with an error (500 → 502 provider_error, 504 → 504
// provider_timeout) is a failed router.call with its bucket as error.type,
// and its router.partner_request child is failed with the same; a partner
// that never answers fails the call at the model's deadline (504
// deadline_exceeded) and its request as provider_timeout.
func TestRouterFailedCallTrace(t *testing.T) {
	t.Parallel()
	models := []model{
		syncModel("acme/failing", partner.NewSyncJSON(t, partner.WithStatus(http.StatusInternalServerError))),
		syncModel("acme/timeout", partner.NewSyncJSON(t, partner.WithStatus(http.StatusGatewayTimeout))),
		syncModel("acme/hang", partner.NewSyncJSON(t, partner.WithHang())),
	}
	g, recv := tracedRouter(t, models)
	tok := token(t, claims{ws: "ws-trace-fail"})
	cases := []struct {
		model, bucket, partnerBucket string
		status                       int
		answer                       string // the partner's status; "" when it never answered
	}{
		{"acme/failing", "provider_error", "provider_error", http.StatusBadGateway, "500"},
		{"acme/timeout", "provider_timeout", "provider_timeout", http.StatusGatewayTimeout, "504"},
		{"acme/hang", "deadline_exceeded", "provider_timeout", http.StatusGatewayTimeout, ""},
	}
	ids := make([]string, len(cases))
	for i, c := range cases {
		r := call(t, "POST", g.URL+"/v1/models/"+c.model, tok, prompt, nil)
		wantBucket(t, c.model, r, c.status, c.bucket)
		ids[i] = r.Header.Get("X-Service-Request-Id")
	}
	spans := recv.Wait(t, 30*time.Second, func(spans []otlp.Span) bool {
		for _, id := range ids {
			rc, found := callOf(spans, id)
			if !found || len(otlp.Named(otlp.Trace(spans, rc.TraceID), "router.partner_request")) == 0 {
				return false
			}
		}
		return true
	})
	for i, c := range cases {
		rc, _ := callOf(spans, ids[i])
		tr := otlp.Trace(spans, rc.TraceID)
		t.Logf("%s's trace:\n%s", c.model, otlp.Dump(tr))
		if !rc.Error || rc.Attrs["error.type"] != c.bucket || rc.Attrs["comfygate.router.bucket"] != c.bucket ||
			rc.Attrs["http.response.status_code"] != strconv.Itoa(c.status) {
			t.Errorf("%s: router.call error %v, attributes %v; want a failed span with error.type %s", c.model, rc.Error, rc.Attrs, c.bucket)
		}
		pr := otlp.Named(tr, "router.partner_request")[0]
		if pr.ParentID != rc.SpanID || !pr.Error || pr.Attrs["error.type"] != c.partnerBucket ||
			pr.Attrs["http.response.status_code"] != c.answer {
			t.Errorf("%s: router.partner_request error %v, attributes %v; want a failed child with error.type %s",
				c.model, pr.Error, pr.Attrs, c.partnerBucket)
		}
	}
}

// syncModel is a synchronous JSON model on peer, 5 credits a call.
func syncModel(id string, peer *partner.Peer) model {
	return model{ID: id, Adapter: "http", Upstream: peer.URL + "/v1/images/generations",
		Credential: partner.DefaultSecret, Schema: inputSchema, Price: 5, Deadline: "2s", Charges: "yes"}
}

// tracedRouter starts a router gateway over models (with the
// model_router options, if any) that exports its spans to a receiver.
func tracedRouter(t *testing.T, models []model, options ...string) (*gateway.Gateway, *otlp.Receiver) {
	t.Helper()
	recv := otlp.Start(t)
	dir := t.TempDir()
	cat := filepath.Join(dir, "catalog.json")
	if err := os.WriteFile(cat, catalogJSON(t, models), 0o600); err != nil {
		t.Fatal(err)
	}
	site := gateway.RouterSite{JWTSecret: jwtSecret, Catalog: cat, Options: options}
	cfg := gateway.RouterConfig("storage embedded ./data\n\t\ttracing", site)
	return gateway.Start(t, cfg, gateway.Options{Dir: dir, Env: recv.Env()}), recv
}

// callOf is the router.call span of the call id.
func callOf(spans []otlp.Span, id string) (otlp.Span, bool) {
	for _, s := range otlp.Named(spans, "router.call") {
		if s.Attrs["comfygate.router.call.id"] == id {
			return s, true
		}
	}
	return otlp.Span{}, false
}
