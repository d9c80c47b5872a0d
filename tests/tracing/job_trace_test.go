// Package tracing tests issue 30 against real gateway processes: the
// access-log placeholders, one trace per job across two gateways, and the
// OpenTelemetry export, received by the OTLP test peer (tests/peers/otlp).
package tracing

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
	"github.com/comfygate/comfygate/tests/peers/otlp"
)

// memberConfig is a gateway of a two-gateway cluster on dsn and redisURL
// sharing blobs, with tracing on and pool gpu on the ComfyUI peer;
// noExecute makes it API-only (it submits, never dispatches).
func memberConfig(dsn, redisURL, blobs, peerURL string, noExecute bool) string {
	jobs := "lease 5s"
	if noExecute {
		jobs += "\n\t\t\tno_execute"
	}
	return gateway.V2Config(fmt.Sprintf(`storage postgres %q
		redis %q
		blobs file_system %q
		tracing
		jobs {
			%s
		}
		pool gpu comfyui {
			worker %s {
				concurrency 1
			}
			refresh 1m
		}`, dsn, redisURL, blobs, jobs, peerURL), gateway.V2Site{Pool: "gpu"})
}

// TestJobTraceAcrossGateways (issue 30, acceptance 1): a job submitted on
// gateway A (API only) and run on gateway B by the ComfyUI peer, both on
// one Postgres database, yields one trace whose spans cover the submit
// (on A), the dispatch, the execution and the output ingest (on B), and
// the peer received that trace's traceparent.
func TestJobTraceAcrossGateways(t *testing.T) {
	t.Parallel()
	dsn, rurl, blobs := pgtest.DSN(t), pgtest.RedisURL(t), t.TempDir()
	recv := otlp.Start(t)
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	a := gateway.Start(t, memberConfig(dsn, rurl, blobs, peer.URL, true), gateway.Options{
		Env: append(recv.Env(), "OTEL_SERVICE_NAME=gateway-a")})
	b := gateway.Start(t, memberConfig(dsn, rurl, blobs, peer.URL, false), gateway.Options{
		Env: append(recv.Env(), "OTEL_SERVICE_NAME=gateway-b")})
	_ = b

	wf := map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("ImageInvert", map[string]any{"image": []any{"1", 0}}),
		"3": gateway.Node("SaveImage", map[string]any{"filename_prefix": "traced", "images": []any{"2", 0}}),
	}
	body, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.Do(t, http.MethodPost, a.URL+"/api/v2/jobs", bytes.NewReader(body), nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit on A: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	done := gateway.WaitJob(t, a.URL, id, 60*time.Second, gateway.Terminal)
	if done["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", done["status"], done["error"])
	}

	// The submit span on A names the job; its trace must gather the rest.
	want := []string{"job.submit", "job.commit",
		"job.dispatch", "job.claim", "job.execute", "comfyui.send", "comfyui.run", "job.output"}
	var trace []otlp.Span
	recv.Wait(t, 30*time.Second, func(spans []otlp.Span) bool {
		for _, s := range otlp.Named(spans, "job.submit") {
			if s.Attrs["comfygate.job.id"] == id {
				trace = otlp.Trace(spans, s.TraceID)
			}
		}
		for _, name := range want {
			if len(otlp.Named(trace, name)) == 0 {
				return false
			}
		}
		return true
	})
	byID := map[string]otlp.Span{}
	for _, s := range trace {
		byID[s.SpanID] = s
	}
	t.Logf("trace %s:\n%s", submit0(trace).TraceID, otlp.Dump(trace))
	parentName := func(s otlp.Span) string { return byID[s.ParentID].Name }
	one := func(name string) otlp.Span { return otlp.Named(trace, name)[0] }

	submit, dispatch := one("job.submit"), one("job.dispatch")
	if submit.Service != "gateway-a" {
		t.Errorf("job.submit came from %q, want gateway-a", submit.Service)
	}
	for _, name := range []string{"job.dispatch", "job.execute", "comfyui.run", "job.output"} {
		if s := one(name); s.Service != "gateway-b" {
			t.Errorf("%s came from %q, want gateway-b (the gateway that ran the job)", name, s.Service)
		}
	}
	// The shape: dispatch is a child of the submit; claim and execute of
	// the dispatch; the worker's send and run of execute; ingest of run.
	for child, parent := range map[string]string{
		"job.commit":   "job.submit",
		"job.dispatch": "job.submit", "job.claim": "job.dispatch", "job.execute": "job.dispatch",
		"comfyui.send": "job.execute", "comfyui.run": "job.execute", "job.output": "comfyui.run",
	} {
		if got := parentName(one(child)); got != parent {
			t.Errorf("%s's parent is %q, want %s", child, got, parent)
		}
	}
	// Validation and the wake-up are phases of the submit: its events.
	if got := eventNames(submit); strings.Join(got, ",") != "job.validate,job.enqueue" {
		t.Errorf("job.submit's events are %v, want job.validate, job.enqueue", got)
	}
	if dispatch.Attrs["comfygate.job.id"] != id || dispatch.Attrs["comfygate.job.status"] != "succeeded" {
		t.Errorf("job.dispatch attributes: %v", dispatch.Attrs)
	}
	var nodes []string
	for _, e := range one("comfyui.run").Events {
		if e.Name == "node.executing" {
			nodes = append(nodes, e.Attrs["comfygate.node.class"])
		}
	}
	if strings.Join(nodes, ",") != "EmptyImage,ImageInvert,SaveImage" {
		t.Errorf("comfyui.run's node events name %v, want EmptyImage, ImageInvert, SaveImage", nodes)
	}
	for _, s := range trace {
		for k, v := range s.Attrs {
			if strings.Contains(v, "filename_prefix") || strings.Contains(v, "class_type") {
				t.Errorf("span %s attribute %s carries workflow text: %q", s.Name, k, v)
			}
		}
	}

	// The WebSocket handshakes carried a traceparent too (comfyui.connect).
	var ws int
	for _, tr := range peer.TraceParents() {
		if tr.Path == "/ws" {
			ws++
		}
	}
	if ws == 0 {
		t.Errorf("no WebSocket handshake carried a traceparent: %v", peer.TraceParents())
	}

	// The peer got the trace's context on POST /prompt, from comfyui.send.
	send := one("comfyui.send")
	wantTP := "00-" + send.TraceID + "-" + send.SpanID + "-01"
	var prompts []string
	for _, tr := range peer.TraceParents() {
		if tr.Method == http.MethodPost && tr.Path == "/prompt" {
			prompts = append(prompts, tr.TraceParent)
			if tr.TraceParent == wantTP {
				return
			}
		}
	}
	t.Errorf("the peer's POST /prompt carried traceparent %v, want %s", prompts, wantTP)
}

func submit0(trace []otlp.Span) otlp.Span { return otlp.Named(trace, "job.submit")[0] }

func eventNames(s otlp.Span) []string {
	var names []string
	for _, e := range s.Events {
		names = append(names, e.Name)
	}
	return names
}
