package tracing

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
	"github.com/comfygate/comfygate/tests/peers/otlp"
)

// TestUploadAndCancelSpans: with tracing on and Caddy's own tracing handler
// in the route, an upload's asset.upload span (with asset.receive and
// asset.commit) and a cancel's job.cancel span are children of Caddy's
// server span, in its trace; and a gateway without the tracing option
// exports nothing.
func TestUploadAndCancelSpans(t *testing.T) {
	t.Parallel()
	recv := otlp.Start(t)
	dir := t.TempDir()
	cfg := `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
		tracing
		jobs {
			no_execute
		}
	}
}
http://:{PORT} {
	bind 127.0.0.1
	route {
		tracing {
			span http
		}
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir, Env: recv.Env()})
	up := gateway.Upload(t, http.DefaultClient, g.URL, gateway.GradientPNG(t, 8), "in.png", "image/png", nil)
	if up.Status != http.StatusCreated {
		t.Fatalf("upload: %d %s", up.Status, up.Body)
	}
	assetID := up.JSON(t)["id"].(string)
	body, _ := json.Marshal(map[string]any{"workflow": gateway.InvertWorkflow("in.png", "c")})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(body), nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	jobID := r.JSON(t)["id"].(string)
	if c := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+jobID+"/cancel", nil, nil); c.Status != http.StatusOK {
		t.Fatalf("cancel: %d %s", c.Status, c.Body)
	}

	spans := recv.Wait(t, 30*time.Second, func(spans []otlp.Span) bool {
		return len(otlp.Named(spans, "asset.commit")) > 0 && len(otlp.Named(spans, "job.cancel")) > 0 &&
			len(otlp.Named(spans, "http")) >= 3
	})
	byID := map[string]otlp.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	upload := otlp.Named(spans, "asset.upload")[0]
	if upload.Attrs["comfygate.asset.id"] != assetID {
		t.Errorf("asset.upload attributes %v, want the asset id %s", upload.Attrs, assetID)
	}
	if p := byID[upload.ParentID]; p.Name != "http" {
		t.Errorf("asset.upload's parent is %q, want Caddy's server span", p.Name)
	}
	for _, name := range []string{"asset.receive", "asset.commit"} {
		s := otlp.Named(spans, name)[0]
		if s.ParentID != upload.SpanID {
			t.Errorf("%s is not a child of asset.upload", name)
		}
		if name == "asset.receive" && s.Attrs["comfygate.asset.size"] == "" {
			t.Errorf("asset.receive has no size: %v", s.Attrs)
		}
	}
	cancel := otlp.Named(spans, "job.cancel")[0]
	if cancel.Attrs["comfygate.job.id"] != jobID || byID[cancel.ParentID].Name != "http" {
		t.Errorf("job.cancel: attributes %v, parent %q", cancel.Attrs, byID[cancel.ParentID].Name)
	}
	submit := otlp.Named(spans, "job.submit")[0]
	if byID[submit.ParentID].Name != "http" || byID[submit.ParentID].TraceID != submit.TraceID {
		t.Errorf("job.submit is not a child of Caddy's server span")
	}
}

// TestTracingOffExportsNothing: without the tracing option nothing is
// exported, though the exporter's environment is set.
func TestTracingOffExportsNothing(t *testing.T) {
	t.Parallel()
	recv := otlp.Start(t)
	g := gateway.Start(t, gateway.V2Config("storage embedded ./data", gateway.V2Site{}), gateway.Options{Env: recv.Env()})
	body, _ := json.Marshal(map[string]any{"workflow": map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "off", "images": []any{"1", 0}}),
	}})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(body), nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	gateway.WaitJob(t, g.URL, r.JSON(t)["id"].(string), 30*time.Second, gateway.Terminal)
	g.Stop() // a shutdown flushes whatever a provider would hold
	if spans := recv.Spans(); len(spans) != 0 {
		t.Fatalf("tracing off exported %d spans:\n%s", len(spans), otlp.Dump(spans))
	}
}
