package nativeapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/builtin"
	"github.com/comfygate/comfygate/internal/workflow"
)

func builtinCatalog(t *testing.T) workflow.Catalog {
	t.Helper()
	cat, err := workflow.ParseObjectInfo(builtin.ObjectInfo())
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func graph(t *testing.T, prompt string) workflow.Graph {
	t.Helper()
	g, err := workflow.DecodeGraph([]byte(prompt))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestReject: what the jobs service refuses becomes ComfyUI's answer.
func TestReject(t *testing.T) {
	cat := builtinCatalog(t)
	const chain = `{"1":{"class_type":"LoadImage","inputs":{"image":"x.png"}},` +
		`"2":{"class_type":"ImageInvert","inputs":{}},` +
		`"3":{"class_type":"SaveImage","inputs":{"images":["2",0],"filename_prefix":"p"}},` +
		`"4":{"class_type":"PreviewImage","inputs":{"images":["2",0]}}}`
	const linked = `{"1":{"class_type":"LoadImage","inputs":{"image":"x.png"}},` +
		`"2":{"class_type":"ImageInvert","inputs":{"image":["1",0]}},` +
		`"3":{"class_type":"SaveImage","inputs":{"images":["2",0],"filename_prefix":"p"}},` +
		`"4":{"class_type":"PreviewImage","inputs":{"images":["2",0]}}}`
	validate := func(prompt string) (workflow.Graph, error) {
		g := graph(t, prompt)
		return g, workflow.Validate(g, cat)
	}
	tests := []struct {
		name       string
		err        func() (workflow.Graph, error)
		status     int
		typ        string
		nodeErrors string // JSON of node_errors, or "" to skip
	}{
		{
			name:   "an input missing: every dependent output is named",
			err:    func() (workflow.Graph, error) { return validate(chain) },
			status: 400, typ: "prompt_outputs_failed_validation",
			nodeErrors: `{"2":{"errors":[{"type":"required_input_missing","message":"Required input is missing",` +
				`"details":"image","extra_info":{"input_name":"image"}}],"dependent_outputs":["3","4"],"class_type":"ImageInvert"}}`,
		},
		{
			name: "an unknown class is reported alone, as ComfyUI stops at it",
			err: func() (workflow.Graph, error) {
				return validate(`{"1":{"class_type":"NoSuchNode","inputs":{}},"2":{"class_type":"ImageInvert","inputs":{}}}`)
			},
			status: 400, typ: "missing_node_type", nodeErrors: `{}`,
		},
		{
			name:   "a node without class_type",
			err:    func() (workflow.Graph, error) { return validate(`{"1":{"inputs":{}}}`) },
			status: 400, typ: "invalid_prompt", nodeErrors: `{}`,
		},
		{
			name: "no output node",
			err: func() (workflow.Graph, error) {
				return validate(`{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}}}`)
			},
			status: 400, typ: "prompt_no_outputs", nodeErrors: `[]`,
		},
		{
			name: "a value out of range",
			err: func() (workflow.Graph, error) {
				return validate(`{"1":{"class_type":"EmptyImage","inputs":{"width":0,"height":8,"batch_size":1,"color":0}},` +
					`"2":{"class_type":"PreviewImage","inputs":{"images":["1",0]}}}`)
			},
			status: 400, typ: "prompt_outputs_failed_validation",
		},
		{
			name: "a file name that is not the caller's asset fails as LoadImage's own validation",
			err: func() (workflow.Graph, error) {
				return graph(t, linked), apierr.New(http.StatusUnprocessableEntity, "missing_asset", "m").WithDetails(map[string]any{
					"missing": []string{"x.png"},
					"node_errors": map[string][]map[string]string{"1": {{"field": "image", "reason": "missing_asset",
						"message": `"x.png" is not one of your assets`}}},
				})
			},
			status: 400, typ: "prompt_outputs_failed_validation",
			nodeErrors: `{"1":{"errors":[{"type":"custom_validation_failed","message":"Custom validation failed for node",` +
				`"details":"image - \"x.png\" is not one of your assets","extra_info":{"input_name":"image"}}],` +
				`"dependent_outputs":["3","4"],"class_type":"LoadImage"}}`,
		},
		{
			name: "a UI-format workflow",
			err: func() (workflow.Graph, error) {
				_, err := workflow.ParseSubmit([]byte(`{"workflow":{"nodes":[],"links":[]}}`), workflow.Limits{})
				return nil, err
			},
			status: 400, typ: "invalid_prompt", nodeErrors: `{}`,
		},
		{
			name: "a full queue keeps its status and Retry-After",
			err: func() (workflow.Graph, error) {
				return nil, apierr.New(http.StatusTooManyRequests, "queue_full", "full").WithRetryAfter(2)
			},
			status: 429, typ: "queue_full",
		},
		{
			name: "no worker answers yet",
			err: func() (workflow.Graph, error) {
				return nil, apierr.New(http.StatusServiceUnavailable, "service_unavailable", "later").WithRetryAfter(5)
			},
			status: 503, typ: "service_unavailable",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g, err := tc.err()
			r, ok := Reject(err, g, cat)
			if !ok {
				t.Fatalf("Reject(%v) declined", err)
			}
			if r.Status != tc.status || r.Body.Error.Type != tc.typ {
				t.Fatalf("got %d %s (%s), want %d %s", r.Status, r.Body.Error.Type, r.Body.Error.Message, tc.status, tc.typ)
			}
			if r.Status == 429 && r.RetryAfter != 2 {
				t.Errorf("RetryAfter = %d", r.RetryAfter)
			}
			if tc.nodeErrors != "" {
				got, _ := json.Marshal(r.Body.NodeErrors)
				if !jsonEqual(t, got, []byte(tc.nodeErrors)) {
					t.Errorf("node_errors = %s\nwant %s", got, tc.nodeErrors)
				}
			}
			body, _ := json.Marshal(r.Body)
			var shape struct {
				Error map[string]json.RawMessage `json:"error"`
			}
			json.Unmarshal(body, &shape)
			for _, k := range []string{"type", "message", "details", "extra_info"} {
				if _, ok := shape.Error[k]; !ok {
					t.Errorf("error lacks %q: %s", k, body)
				}
			}
		})
	}
}

// TestRejectDeclines: failures that are not the client's go to the error
// envelope.
func TestRejectDeclines(t *testing.T) {
	for _, err := range []error{errors.New("disk on fire"), apierr.Upstream(errors.New("db down"))} {
		if r, ok := Reject(err, nil, nil); ok {
			t.Errorf("Reject(%v) = %+v, want declined", err, r)
		}
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
