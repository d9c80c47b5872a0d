package workflow

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

type wantErr struct{ node, field, reason string }

func TestValidate(t *testing.T) {
	cat := loadCatalog(t)
	// save3 is a SaveImage reading node 2, appended to graphs that need an output.
	const save3 = `"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "x"}}`
	tests := []struct {
		name     string
		workflow string
		want     []wantErr // empty: valid
		// wantCount, when set, is the exact number of field errors.
		wantCount int
	}{
		{name: "valid load invert save", workflow: validWorkflow},
		{name: "required input missing", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0]}}}`,
			want: []wantErr{{"3", "filename_prefix", ReasonRequiredInputMissing}}, wantCount: 1},
		{name: "required input missing on a node without inputs", workflow: `{
			"2": {"class_type": "ImageInvert"},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonRequiredInputMissing}}},
		{name: "return type mismatch", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 1]}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonReturnTypeMismatch}}, wantCount: 1},
		{name: "union type without overlap", workflow: `{
			"1": {"class_type": "PrimitiveAny", "inputs": {"value": "a", "flag": true}},
			"2": {"class_type": "PrimitiveAny", "inputs": {"value": "a", "flag": true, "mask": ["1", 1]}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["2", 2]}}}`,
			want: []wantErr{{"2", "mask", ReasonReturnTypeMismatch}}, wantCount: 1},
		{name: "union type overlap and wildcards match", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "PrimitiveAny", "inputs": {"value": "a", "flag": true, "mask": ["1", 1]}},
			"4": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
			"5": {"class_type": "ImageScale", "inputs": {"image": ["4", 0], "upscale_method": ["2", 0], "width": ["2", 1], "height": 0, "crop": "center"}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 1]}},
			"6": {"class_type": "SaveImage", "inputs": {"images": ["5", 0], "filename_prefix": ["2", 2]}}}`},
		{name: "legacy combo value not in list", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "dog.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},` + save3 + `}`,
			want: []wantErr{{"1", "image", ReasonValueNotInList}}, wantCount: 1},
		{name: "v3 combo value not in list", workflow: scaleGraph(`"upscale_method": "bogus", "width": 10, "height": 10, "crop": "disabled"`),
			want: []wantErr{{"2", "upscale_method", ReasonValueNotInList}}, wantCount: 1},
		{name: "combo given a number", workflow: scaleGraph(`"upscale_method": 1, "width": 10, "height": 10, "crop": "disabled"`),
			want: []wantErr{{"2", "upscale_method", ReasonValueNotInList}}},
		{name: "value smaller than min", workflow: scaleGraph(`"upscale_method": "area", "width": -1, "height": 10, "crop": "disabled"`),
			want: []wantErr{{"2", "width", ReasonValueSmallerThanMin}}, wantCount: 1},
		{name: "value bigger than max", workflow: scaleGraph(`"upscale_method": "area", "width": 16384, "height": 16385, "crop": "center"`),
			want: []wantErr{{"2", "height", ReasonValueBiggerThanMax}}, wantCount: 1},
		{name: "INT given a string", workflow: scaleGraph(`"upscale_method": "area", "width": "512", "height": 10, "crop": "center"`),
			want: []wantErr{{"2", "width", ReasonInvalidInputType}}, wantCount: 1},
		{name: "INT given a fraction", workflow: scaleGraph(`"upscale_method": "area", "width": 1.5, "height": 10, "crop": "center"`),
			want: []wantErr{{"2", "width", ReasonInvalidInputType}}, wantCount: 1},
		{name: "INT given an integral exponent", workflow: scaleGraph(`"upscale_method": "area", "width": 1e3, "height": 1.0, "crop": "center"`)},
		{name: "huge exponents stay cheap", workflow: scaleGraph(`"upscale_method": "area", "width": 1e999999999, "height": -1e400, "crop": "center"`),
			want: []wantErr{{"2", "width", ReasonInvalidInputType}, {"2", "height", ReasonValueSmallerThanMin}}, wantCount: 2},
		{name: "STRING given a number", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": 5}}}`,
			want: []wantErr{{"3", "filename_prefix", ReasonInvalidInputType}}, wantCount: 1},
		{name: "BOOLEAN given a string and FLOAT optional out of range", workflow: `{
			"1": {"class_type": "PrimitiveAny", "inputs": {"value": {"__value__": "wrapped"}, "flag": "true", "scale": 2.6}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}`,
			want: []wantErr{{"1", "flag", ReasonInvalidInputType}, {"1", "scale", ReasonValueBiggerThanMax}}, wantCount: 2},
		{name: "FLOAT given a string", workflow: `{
			"1": {"class_type": "PrimitiveAny", "inputs": {"value": "v", "flag": false, "scale": "1"}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}`,
			want: []wantErr{{"1", "scale", ReasonInvalidInputType}}, wantCount: 1},
		{name: "link-only type given a literal", workflow: `{
			"2": {"class_type": "ImageInvert", "inputs": {"image": "cat.png"}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonInvalidInputType}}, wantCount: 1},
		{name: "seed at uint64 max passes, one more fails", workflow: `{
			"1": {"class_type": "KSampler", "inputs": {"model": ["9", 0], "seed": 18446744073709551615, "steps": 20, "cfg": 8, "sampler_name": "euler", "scheduler": "karras", "positive": ["9", 0], "negative": ["9", 0], "latent_image": ["9", 0], "denoise": 1}},
			"2": {"class_type": "KSampler", "inputs": {"model": ["9", 0], "seed": 18446744073709551616, "steps": 0, "cfg": 100.01, "sampler_name": "euler", "scheduler": "karras", "positive": ["9", 0], "negative": ["9", 0], "latent_image": ["9", 0], "denoise": 1}},
			"9": {"class_type": "PrimitiveAny", "inputs": {"value": "v", "flag": true}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
			"4": {"class_type": "PreviewAny", "inputs": {"source": ["2", 0]}}}`,
			want: []wantErr{{"2", "seed", ReasonValueBiggerThanMax}, {"2", "steps", ReasonValueSmallerThanMin}, {"2", "cfg", ReasonValueBiggerThanMax}}, wantCount: 3},
		{name: "bad linked inputs", workflow: `{
			"1": {"class_type": "PrimitiveAny", "inputs": {"value": ["1"], "flag": [1, 0], "mask": ["1", -1], "scale": ["1", "0"]}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}},
			"4": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0.5]}}}`,
			want: []wantErr{{"1", "value", ReasonBadLinkedInput}, {"1", "flag", ReasonBadLinkedInput}, {"1", "mask", ReasonBadLinkedInput}, {"1", "scale", ReasonBadLinkedInput}, {"4", "source", ReasonBadLinkedInput}}, wantCount: 5},
		{name: "__value__ list is a literal, not a link", workflow: `{
			"1": {"class_type": "PrimitiveAny", "inputs": {"value": {"__value__": ["a"]}, "flag": true}},
			"3": {"class_type": "PreviewAny", "inputs": {"source": ["1", 0]}}}`,
			want: []wantErr{{"1", "value", ReasonInvalidInputType}}, wantCount: 1},
		{name: "unknown class", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "NoSuchNode", "inputs": {"image": ["1", 0]}},` + save3 + `}`,
			want: []wantErr{{"2", "class_type", ReasonMissingNodeType}}, wantCount: 1},
		{name: "missing class_type", workflow: `{
			"1": {"inputs": {"image": "cat.png"}},
			"2": {"class_type": "", "inputs": {}},
			"4": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}`,
			want: []wantErr{{"1", "class_type", ReasonMissingNodeType}, {"2", "class_type", ReasonMissingNodeType}}, wantCount: 2},
		{name: "invalid node ids", workflow: `{
			"": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"a\u0007b": {"class_type": "ImageInvert", "inputs": {"image": ["", 0]}},
			"3": {"class_type": "SaveImage", "inputs": {"images": ["a\u0007b", 0], "filename_prefix": "x"}}}`,
			want: []wantErr{{"", "", ReasonInvalidNodeID}, {"a\ab", "", ReasonInvalidNodeID}}, wantCount: 2},
		{name: "dangling link", workflow: `{
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["99", 0]}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonDanglingLink}}, wantCount: 1},
		{name: "output slot out of range", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 2]}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonInvalidOutputSlot}}, wantCount: 1},
		{name: "link to a node without outputs", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["4", 0]}},
			"4": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonInvalidOutputSlot}}, wantCount: 1},
		{name: "cycle reports every node on it", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["5", 0]}},
			"4": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},
			"5": {"class_type": "ImageBlendish", "inputs": {"a": ["4", 0], "b": ["1", 0]}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonCycle}, {"4", "image", ReasonCycle}, {"5", "a", ReasonCycle}, {"5", "class_type", ReasonMissingNodeType}}, wantCount: 4},
		{name: "cycle no output depends on is still refused", workflow: validWorkflowWith(`
			"7": {"class_type": "ImageInvert", "inputs": {"image": ["8", 0]}},
			"8": {"class_type": "ImageInvert", "inputs": {"image": ["7", 0]}}`),
			want: []wantErr{{"7", "image", ReasonCycle}, {"8", "image", ReasonCycle}}, wantCount: 2},
		{name: "self loop", workflow: `{
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["2", 0]}},` + save3 + `}`,
			want: []wantErr{{"2", "image", ReasonCycle}}, wantCount: 1},
		{name: "no output node", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}}}`,
			want: []wantErr{{"", "", ReasonPromptNoOutputs}}, wantCount: 0},
		{name: "empty workflow has no outputs", workflow: `{}`,
			want: []wantErr{{"", "", ReasonPromptNoOutputs}}, wantCount: 0},
		{name: "nodes no output depends on are not input-checked", workflow: validWorkflowWith(`
			"7": {"class_type": "ImageScale", "inputs": {"width": -5, "image": ["99", 0]}}`)},
		{name: "undeclared inputs are ignored", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png", "upload": "image", "extra": [1, 2, 3]}},
			"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},` + save3 + `}`},
		{name: "all errors are collected", workflow: `{
			"1": {"class_type": "LoadImage", "inputs": {"image": "dog.png"}},
			"2": {"class_type": "ImageScale", "inputs": {"image": ["1", 1], "upscale_method": "x", "width": -1, "height": 99999}},` + save3 + `}`,
			want: []wantErr{{"1", "image", ReasonValueNotInList}, {"2", "image", ReasonReturnTypeMismatch}, {"2", "upscale_method", ReasonValueNotInList},
				{"2", "width", ReasonValueSmallerThanMin}, {"2", "height", ReasonValueBiggerThanMax}, {"2", "crop", ReasonRequiredInputMissing}}, wantCount: 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(graphOf(t, tc.workflow), cat)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			ae := wantAPIError(t, err, http.StatusUnprocessableEntity, "invalid_workflow")
			ne := nodeErrorsOf(t, ae)
			count := 0
			for _, fes := range ne {
				count += len(fes)
			}
			for _, w := range tc.want {
				if w.reason == ReasonPromptNoOutputs {
					ges, _ := ae.Details["errors"].([]GraphError)
					if len(ges) != 1 || ges[0].Reason != ReasonPromptNoOutputs {
						t.Errorf("details.errors = %#v, want prompt_no_outputs", ae.Details["errors"])
					}
					continue
				}
				if !hasFieldError(ne, w.node, w.field, w.reason) {
					t.Errorf("missing %+v in %+v", w, ne)
				}
			}
			if tc.wantCount > 0 || tc.want[0].reason == ReasonPromptNoOutputs {
				if count != tc.wantCount {
					t.Errorf("got %d field errors, want %d: %+v", count, tc.wantCount, ne)
				}
			}
		})
	}
}

func scaleGraph(widgets string) string {
	return `{
		"1": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}},
		"2": {"class_type": "ImageScale", "inputs": {"image": ["1", 0], ` + widgets + `}},
		"3": {"class_type": "SaveImage", "inputs": {"images": ["2", 0], "filename_prefix": "x"}}}`
}

func validWorkflowWith(extra string) string {
	return strings.TrimSuffix(strings.TrimSpace(validWorkflow), "}") + "," + extra + "}"
}

func TestValidateUnknownClassSuppressesNoOutputs(t *testing.T) {
	cat := loadCatalog(t)
	err := Validate(graphOf(t, `{"1": {"class_type": "SaveImageCustom", "inputs": {}}}`), cat)
	ae := wantAPIError(t, err, http.StatusUnprocessableEntity, "invalid_workflow")
	if _, ok := ae.Details["errors"]; ok {
		t.Errorf("an unknown class may be the output node; got details.errors %v", ae.Details["errors"])
	}
	if !hasFieldError(nodeErrorsOf(t, ae), "1", "class_type", ReasonMissingNodeType) {
		t.Errorf("node_errors = %v", ae.Details["node_errors"])
	}
}

func TestValidateResolvedInputs(t *testing.T) {
	cat := loadCatalog(t)
	const asset = `{"__type": "core/ASSET", "info": {"id": "9f8a1c0d-2b3e-4f56-8a7b-1c2d3e4f5a6b"}}`
	tests := []struct {
		name       string
		image      string
		resolved   bool
		wantReason string // "" = valid
	}{
		{"file name not in the combo list", `"mine.png"`, false, ReasonValueNotInList},
		{"file name resolved by the caller", `"mine.png"`, true, ""},
		{"asset object unresolved", asset, false, ReasonUnresolvedAssetRef},
		{"asset object resolved", asset, true, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := graphOf(t, strings.Replace(validWorkflow, `"cat.png"`, tc.image, 1))
			var opts []Option
			if tc.resolved {
				opts = append(opts, WithResolvedInputs(map[InputKey]bool{{Node: "1", Input: "image"}: true}))
			}
			err := Validate(g, cat, opts...)
			if tc.wantReason == "" {
				if err != nil {
					t.Fatalf("Validate = %v", err)
				}
				return
			}
			ae := wantAPIError(t, err, http.StatusUnprocessableEntity, "invalid_workflow")
			if !hasFieldError(nodeErrorsOf(t, ae), "1", "image", tc.wantReason) {
				t.Errorf("node_errors = %+v", ae.Details["node_errors"])
			}
		})
	}
}

// TestValidateLongGraphs proves traversals are iterative: a 5 000-node chain
// validates and a 5 000-node ring reports every node.
func TestValidateLongGraphs(t *testing.T) {
	cat := loadCatalog(t)
	const n = 5000
	var b strings.Builder
	b.WriteString(`{"0": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}}`)
	for i := 1; i < n-1; i++ {
		fmt.Fprintf(&b, `,"%d": {"class_type": "ImageInvert", "inputs": {"image": ["%d", 0]}}`, i, i-1)
	}
	fmt.Fprintf(&b, `,"%d": {"class_type": "SaveImage", "inputs": {"images": ["%d", 0], "filename_prefix": "x"}}}`, n-1, n-2)
	if err := Validate(graphOf(t, b.String()), cat); err != nil {
		t.Fatalf("chain: %v", err)
	}

	b.Reset()
	fmt.Fprintf(&b, `{"s": {"class_type": "SaveImage", "inputs": {"images": ["0", 0], "filename_prefix": "x"}}`)
	for i := 0; i < n-1; i++ {
		fmt.Fprintf(&b, `,"%d": {"class_type": "ImageInvert", "inputs": {"image": ["%d", 0]}}`, i, (i+1)%(n-1))
	}
	b.WriteString("}")
	ae := wantAPIError(t, Validate(graphOf(t, b.String()), cat), http.StatusUnprocessableEntity, "invalid_workflow")
	ne := nodeErrorsOf(t, ae)
	if len(ne) != n-1 {
		t.Fatalf("ring: %d nodes reported, want %d", len(ne), n-1)
	}
	if _, ok := ne["s"]; ok {
		t.Error("the output reading the ring is not on it")
	}
}
