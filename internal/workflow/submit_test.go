package workflow

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestParseSubmitRejects(t *testing.T) {
	small := Limits{MaxBodyBytes: 4096, MaxNodes: 3, MaxDepth: 8, MaxStringBytes: 16, MaxArrayLen: 4}
	tests := []struct {
		name        string
		body        string
		lim         Limits
		status      int
		code        string
		wantMember  string // details.member
		wantLimit   string // details.limit
		wantNodeErr *wantErr
	}{
		{name: "over max body bytes", body: `{"workflow": {}, "extra_data": {"api_key_comfy_org": "` + strings.Repeat("k", 5000) + `"}}`,
			lim: small, status: 413, code: "payload_too_large"},
		{name: "empty", body: ``, status: 400, code: "invalid_request"},
		{name: "whitespace only", body: " \n", status: 400, code: "invalid_request"},
		{name: "not json", body: `workflow=1`, status: 400, code: "invalid_request"},
		{name: "broken json", body: `{"workflow": {"1": }`, status: 400, code: "invalid_request"},
		{name: "missing comma", body: `{"workflow": {} "extra_data": {}}`, status: 400, code: "invalid_request"},
		{name: "array at top", body: `[{"workflow": {}}]`, status: 400, code: "invalid_request"},
		{name: "string at top", body: `"workflow"`, status: 400, code: "invalid_request"},
		{name: "null at top", body: `null`, status: 400, code: "invalid_request"},
		{name: "two objects", body: `{} {}`, status: 400, code: "invalid_request"},
		{name: "unbalanced", body: `{"workflow": {]}`, status: 400, code: "invalid_request"},
		{name: "unterminated string", body: `{"workflow": {"1`, status: 400, code: "invalid_request"},
		{name: "ui format at top level", body: `{"last_node_id": 3, "last_link_id": 2, "nodes": [{"id": 1, "type": "LoadImage"}], "links": [[1, 1, 0, 2, 0, "IMAGE"]], "version": 0.4}`,
			status: 422, code: "workflow_format_ui"},
		{name: "ui format inside workflow", body: `{"workflow": {"nodes": [], "links": [], "groups": []}}`,
			status: 422, code: "workflow_format_ui"},
		{name: "missing workflow", body: `{}`, status: 422, code: "invalid_workflow", wantMember: "workflow"},
		{name: "null workflow", body: `{"workflow": null}`, status: 422, code: "invalid_workflow", wantMember: "workflow"},
		{name: "array workflow", body: `{"workflow": [1, 2]}`, status: 422, code: "invalid_workflow", wantMember: "workflow"},
		{name: "string workflow", body: `{"workflow": "{}"}`, status: 422, code: "invalid_workflow", wantMember: "workflow"},
		{name: "reserved webhook_url", body: `{"workflow": {}, "webhook_url": "https://example.com"}`, status: 422, code: "invalid_workflow", wantMember: "webhook_url"},
		{name: "reserved inputs", body: `{"workflow": {}, "inputs": {}}`, status: 422, code: "invalid_workflow", wantMember: "inputs"},
		{name: "unknown top-level member", body: `{"workflow": {}, "client_id": "abc"}`, status: 422, code: "invalid_workflow", wantMember: "client_id"},
		{name: "unknown extra_data member", body: `{"workflow": {}, "extra_data": {"extra_pnginfo": {}}}`, status: 422, code: "invalid_workflow", wantMember: "extra_data.extra_pnginfo"},
		{name: "extra_data api key not a string", body: `{"workflow": {}, "extra_data": {"api_key_comfy_org": 12}}`, status: 422, code: "invalid_workflow", wantMember: "extra_data.api_key_comfy_org"},
		{name: "extra_data not an object", body: `{"workflow": {}, "extra_data": "k"}`, status: 422, code: "invalid_workflow", wantMember: "extra_data"},
		{name: "too deep", body: `{"workflow": {"1": {"inputs": {"a": [[[[[[1]]]]]]}}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_depth"},
		{name: "string too long", body: `{"workflow": {"1": {"class_type": "` + strings.Repeat("A", 17) + `"}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_string_bytes"},
		{name: "key too long", body: `{"workflow": {"` + strings.Repeat("1", 17) + `": {}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_string_bytes"},
		{name: "array too long", body: `{"workflow": {"1": {"inputs": {"a": {"__value__": [1, 2, 3, 4, 5]}}}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_array_len"},
		{name: "object too wide", body: `{"workflow": {"1": {"inputs": {"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_array_len"},
		{name: "too many nodes", body: `{"workflow": {"1": {}, "2": {}, "3": {}, "4": {}}}`, lim: small, status: 422, code: "invalid_workflow", wantLimit: "max_nodes"},
		{name: "too many nodes with an escaped key", body: `{"work\u0066low": {"1": {}, "2": {}, "3": {}, "4": {}}}`, lim: Limits{MaxNodes: 3}, status: 422, code: "invalid_workflow", wantLimit: "max_nodes"},
		{name: "number too long", body: `{"workflow": {"1": {"inputs": {"seed": ` + strings.Repeat("9", 300) + `}}}}`, status: 422, code: "invalid_workflow", wantLimit: "max_number_bytes"},
		{name: "node not an object", body: `{"workflow": {"1": [1]}}`, status: 422, code: "invalid_workflow", wantNodeErr: &wantErr{"1", "", ReasonInvalidNode}},
		{name: "inputs not an object", body: `{"workflow": {"1": {"class_type": "LoadImage", "inputs": ["cat.png"]}}}`, status: 422, code: "invalid_workflow", wantNodeErr: &wantErr{"1", "inputs", ReasonInvalidNode}},
		{name: "class_type not a string", body: `{"workflow": {"1": {"class_type": 7, "inputs": {}}}}`, status: 422, code: "invalid_workflow", wantNodeErr: &wantErr{"1", "class_type", ReasonMissingNodeType}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := ParseSubmit([]byte(tc.body), tc.lim)
			if sub != nil {
				t.Fatalf("got a submission for a refused body")
			}
			ae := wantAPIError(t, err, tc.status, tc.code)
			if tc.wantMember != "" && ae.Details["member"] != tc.wantMember {
				t.Errorf("details.member = %v, want %s", ae.Details["member"], tc.wantMember)
			}
			if tc.wantLimit != "" && ae.Details["limit"] != tc.wantLimit {
				t.Errorf("details.limit = %v, want %s", ae.Details["limit"], tc.wantLimit)
			}
			if w := tc.wantNodeErr; w != nil && !hasFieldError(nodeErrorsOf(t, ae), w.node, w.field, w.reason) {
				t.Errorf("node_errors = %+v, want %+v", ae.Details["node_errors"], *w)
			}
		})
	}
}

func TestParseSubmitAccepts(t *testing.T) {
	body := `{"workflow": ` + validWorkflow + `, "extra_data": {"api_key_comfy_org": "comfyui-key"}}`
	sub, err := ParseSubmit([]byte(body), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if sub.ExtraData["api_key_comfy_org"] != "comfyui-key" || len(sub.ExtraData) != 1 {
		t.Errorf("extra_data = %v", sub.ExtraData)
	}
	if !bytes.Equal(sub.RawWorkflow, []byte(validWorkflow)) {
		t.Errorf("raw workflow not kept verbatim:\n%s", sub.RawWorkflow)
	}
	n := sub.Workflow["2"]
	if len(sub.Workflow) != 3 || n.ClassType != "ImageInvert" {
		t.Fatalf("graph = %+v", sub.Workflow)
	}
	if l, ok := ParseLink(n.Inputs["image"]); !ok || l != (Link{Node: "1", Slot: 0}) {
		t.Errorf("link = %+v %v", l, ok)
	}
	if !bytes.Contains(sub.Workflow["1"].Meta, []byte("Load")) {
		t.Errorf("_meta lost: %s", sub.Workflow["1"].Meta)
	}
	// extra_data may be absent, null or empty.
	for _, b := range []string{`{"workflow": {}}`, `{"workflow": {}, "extra_data": null}`, `{"workflow": {}, "extra_data": {}}`} {
		if _, err := ParseSubmit([]byte(b), DefaultLimits()); err != nil {
			t.Errorf("%s: %v", b, err)
		}
	}
}

func TestGraphSetInputRoundTrip(t *testing.T) {
	g := graphOf(t, validWorkflow)
	if err := g.SetInput("1", "image", "staged/cat.png"); err != nil {
		t.Fatal(err)
	}
	if err := g.SetInput("9", "image", "x"); err == nil {
		t.Error("SetInput on a missing node must fail")
	}
	n := g["2"]
	n.Inputs = nil
	g["2"] = n
	if err := g.SetInput("2", "image", []any{"1", 0}); err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]struct {
		ClassType string         `json:"class_type"`
		Inputs    map[string]any `json:"inputs"`
	}
	if err := json.Unmarshal(out, &back); err != nil {
		t.Fatal(err)
	}
	if back["1"].Inputs["image"] != "staged/cat.png" || back["2"].Inputs["image"].([]any)[0] != "1" || back["3"].ClassType != "SaveImage" {
		t.Errorf("round trip = %s", out)
	}
	if err := Validate(g, loadCatalog(t), WithResolvedInputs(map[InputKey]bool{{"1", "image"}: true})); err != nil {
		t.Errorf("rewritten graph: %v", err)
	}
}
