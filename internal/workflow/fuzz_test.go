package workflow

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"testing"

	"github.com/comfygate/comfygate/internal/apierr/apierrtest"
)

// fuzzLimits are small so that the fuzzer crosses every cap.
var fuzzLimits = Limits{MaxBodyBytes: 64 << 10, MaxNodes: 40, MaxDepth: 12, MaxStringBytes: 512, MaxArrayLen: 64}

var submitSeeds = []string{
	`{"workflow":` + validWorkflow + `}`,
	`{"workflow":{"1":{"class_type":"KSampler","inputs":{"seed":18446744073709551615,"steps":1e400,"cfg":-0.0,"sampler_name":"euler"}}}}`,
	`{"workflow":{"1":{"class_type":"ImageScale","inputs":{"image":["2",0],"width":1.5}},"2":{"class_type":"ImageScale","inputs":{"image":["1",0]}}}}`,
	`{"workflow":{"1":{"class_type":"LoadImage","inputs":{"image":{"type":"core/ASSET","info":{"id":"a1"}}}}},"extra_data":{"api_key_comfy_org":"k"}}`,
	`{"workflow":{"1":{"class_type":"PreviewAny","inputs":{"source":["1",-1]}},"2":{"class_type":"SaveImage","inputs":{"images":["9",99999999999999999999]}}}}`,
	`{"workflow":{"nodes":[],"links":[]}}`, `{"nodes":[]}`, `{"webhook_url":"x","workflow":{}}`,
	`{"workflow":{"a":{"class_type":"SaveImage","CLASS_TYPE":"LoadImage","inputs":{}}}}`,
	`{"workflow":{"1":{"class_type":"\u004coadImage","inputs":{"image":"a\ud800.png"}}}}`,
	`[]`, `null`, `{"workflow":[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]}`, `{"workflow":{"1":"x"}}`,
}

// FuzzParseSubmit runs a submit body through what POST /api/v2/jobs does
// before dispatch: parse, list asset references, validate. Every refusal is
// a 4xx in the envelope; an accepted workflow respects the caps and decodes
// from its stored bytes (DecodeGraph) to exactly the graph that was
// validated.
func FuzzParseSubmit(f *testing.F) {
	for _, s := range submitSeeds {
		f.Add([]byte(s))
	}
	cat := loadCatalog(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		sub, err := ParseSubmit(body, fuzzLimits)
		if err != nil {
			e := apierrtest.ClientError(t, body, err)
			if len(body) > int(fuzzLimits.MaxBodyBytes) != (e.Status == http.StatusRequestEntityTooLarge) {
				t.Fatalf("%d-byte body answered %d", len(body), e.Status)
			}
			return
		}
		if len(sub.Workflow) > fuzzLimits.MaxNodes {
			t.Fatalf("%d nodes accepted; the cap is %d", len(sub.Workflow), fuzzLimits.MaxNodes)
		}
		if !json.Valid(sub.RawWorkflow) {
			t.Fatalf("RawWorkflow %q is not JSON", sub.RawWorkflow)
		}
		again, err := DecodeGraph(sub.RawWorkflow)
		if err != nil {
			t.Fatalf("DecodeGraph of an accepted workflow: %v", err)
		}
		if !reflect.DeepEqual(normal(again), normal(sub.Workflow)) {
			t.Fatalf("DecodeGraph(%q) = %#v; ParseSubmit validated %#v", sub.RawWorkflow, again, sub.Workflow)
		}
		for k := range sub.ExtraData {
			if !allowedExtraData[k] {
				t.Fatalf("extra_data member %q accepted", k)
			}
		}
		refs, err := AssetRefs(sub.Workflow, cat)
		if err != nil {
			apierrtest.ClientError(t, body, err)
			return
		}
		resolved := map[InputKey]bool{}
		for _, r := range refs {
			if _, ok := sub.Workflow[r.Node].Inputs[r.Input]; !ok {
				t.Fatalf("AssetRefs named %s.%s, which the workflow does not have", r.Node, r.Input)
			}
			if r.AssetID != "" {
				resolved[InputKey{Node: r.Node, Input: r.Input}] = true
			}
		}
		if err := Validate(sub.Workflow, cat, WithResolvedInputs(resolved)); err != nil {
			apierrtest.ClientError(t, body, err)
		}
	})
}

// normal makes nil and empty input maps compare equal.
func normal(g Graph) Graph {
	out := Graph{}
	for id, n := range g {
		if len(n.Inputs) == 0 {
			n.Inputs = nil
		}
		if len(n.Meta) == 0 {
			n.Meta = nil
		}
		out[id] = n
	}
	return out
}

// FuzzParseObjectInfo feeds a worker's /object_info answer (a worker is
// not trusted to be well formed) and then validates a workflow using every
// class it declared: neither may panic, and Validate answers nil or a 4xx.
func FuzzParseObjectInfo(f *testing.F) {
	data, err := os.ReadFile("testdata/object_info.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data, []byte(`{"image":"x.png","width":1,"seed":-1}`))
	for _, s := range []string{`{}`, `[]`, `{"A":null}`, `{"A":{"input":{"required":{"x":["INT",{"min":5,"max":1}]}}}}`,
		`{"A":{"input":{"required":{"x":[["a","b"]]}},"output":["IMAGE"],"output_node":true}}`,
		`{"A":{"input":{"required":{"x":["COMBO",{"options":[1,"a",null]}]}},"output":"IMAGE"}}`,
		`{"A":{"input":{"optional":{"x":["FLOAT",{"min":1e309,"step":0}]}},"output_node":1}}`} {
		f.Add([]byte(s), []byte(`{"x":3}`))
	}
	f.Fuzz(func(t *testing.T, info, inputs []byte) {
		cat, err := ParseObjectInfo(info)
		if err != nil {
			return // the pool keeps its previous catalog
		}
		var in map[string]json.RawMessage
		if json.Unmarshal(inputs, &in) != nil {
			in = nil
		}
		g := Graph{}
		i := 0
		for class := range cat {
			i++
			id := string(rune('a' + i%26))
			g[id] = Node{ClassType: class, Inputs: in}
			if i > 30 {
				break
			}
		}
		if err := Validate(g, cat); err != nil {
			apierrtest.ClientError(t, info, err)
		}
		if _, err := AssetRefs(g, cat); err != nil {
			apierrtest.ClientError(t, info, err)
		}
	})
}
