package schema

import (
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func mustCompile(t testing.TB, path string) *Validator {
	t.Helper()
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	v, err := Compile(doc)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return v
}

// roundTrip renders details as the client sees them.
func roundTrip(t *testing.T, d []Detail) []map[string]any {
	t.Helper()
	b, err := json.Marshal(map[string]any{"detail": d})
	if err != nil {
		t.Fatal(err)
	}
	var out struct {
		Detail []map[string]any `json:"detail"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out.Detail
}

func TestValidateDetails(t *testing.T) {
	v := mustCompile(t, "testdata/flux.json")
	tests := []struct {
		name string
		body string
		want []map[string]any // each as it appears on the wire
	}{
		{"valid minimal", `{"prompt":"a cat"}`, nil},
		{"valid full", `{"prompt":"a cat","num_images":2,"guidance_scale":3.5,"image_size":{"width":512,"height":512},
			"seed":null,"sync_mode":true,"output_format":"png","mode":"fast","tags":["a","b"],
			"image_url":"data:image/png;base64,AAAA","loras":[{"path":"x","scale":1}],"size_or_preset":"square",
			"bad_pattern":"anything","tree":{"name":"r","children":[{"name":"c","children":[]}]},"meta":{"a":1},"strength":null}`, nil},
		{"integral float is an integer", `{"prompt":"a","num_images":2.0}`, nil},
		{"missing", `{}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "Field required", "type": "missing", "input": map[string]any{}}}},
		{"string_type", `{"prompt":5}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "Input should be a valid string", "type": "string_type", "input": 5.0}}},
		{"int_type", `{"prompt":"a","num_images":"2"}`, []map[string]any{
			{"loc": []any{"body", "num_images"}, "msg": "Input should be a valid integer", "type": "int_type", "input": "2"}}},
		{"int_from_float", `{"prompt":"a","num_images":1.5}`, []map[string]any{
			{"loc": []any{"body", "num_images"}, "msg": "Input should be a valid integer, got a number with a fractional part", "type": "int_from_float", "input": 1.5}}},
		{"float_type", `{"prompt":"a","guidance_scale":"x"}`, []map[string]any{
			{"loc": []any{"body", "guidance_scale"}, "msg": "Input should be a valid number", "type": "float_type", "input": "x"}}},
		{"bool_type", `{"prompt":"a","sync_mode":1}`, []map[string]any{
			{"loc": []any{"body", "sync_mode"}, "msg": "Input should be a valid boolean", "type": "bool_type", "input": 1.0}}},
		{"dict_type nested", `{"prompt":"a","image_size":[1]}`, []map[string]any{
			{"loc": []any{"body", "image_size"}, "msg": "Input should be a valid dictionary", "type": "dict_type", "input": []any{1.0}}}},
		{"list_type", `{"prompt":"a","tags":"x"}`, []map[string]any{
			{"loc": []any{"body", "tags"}, "msg": "Input should be a valid list", "type": "list_type", "input": "x"}}},
		{"null where not nullable", `{"prompt":null}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "Input should be a valid string", "type": "string_type"}}},
		{"enum", `{"prompt":"a","output_format":"gif"}`, []map[string]any{
			{"loc": []any{"body", "output_format"}, "msg": "Input should be 'jpeg' or 'png'", "type": "enum",
				"ctx": map[string]any{"expected": "'jpeg' or 'png'"}, "input": "gif"}}},
		{"literal_error", `{"prompt":"a","mode":"slow"}`, []map[string]any{
			{"loc": []any{"body", "mode"}, "msg": "Input should be 'fast'", "type": "literal_error",
				"ctx": map[string]any{"expected": "'fast'"}, "input": "slow"}}},
		{"greater_than_equal", `{"prompt":"a","num_images":0}`, []map[string]any{
			{"loc": []any{"body", "num_images"}, "msg": "Input should be greater than or equal to 1", "type": "greater_than_equal",
				"ctx": map[string]any{"ge": 1.0}, "input": 0.0}}},
		{"less_than_equal", `{"prompt":"a","num_images":5}`, []map[string]any{
			{"loc": []any{"body", "num_images"}, "msg": "Input should be less than or equal to 4", "type": "less_than_equal",
				"ctx": map[string]any{"le": 4.0}, "input": 5.0}}},
		{"greater_than", `{"prompt":"a","guidance_scale":0}`, []map[string]any{
			{"loc": []any{"body", "guidance_scale"}, "msg": "Input should be greater than 0", "type": "greater_than",
				"ctx": map[string]any{"gt": 0.0}, "input": 0.0}}},
		{"less_than", `{"prompt":"a","guidance_scale":20}`, []map[string]any{
			{"loc": []any{"body", "guidance_scale"}, "msg": "Input should be less than 20", "type": "less_than",
				"ctx": map[string]any{"lt": 20.0}, "input": 20.0}}},
		{"fractional bound", `{"prompt":"a","strength":1.5}`, []map[string]any{
			{"loc": []any{"body", "strength"}, "msg": "Input should be less than or equal to 1", "type": "less_than_equal",
				"ctx": map[string]any{"le": 1.0}, "input": 1.5}}},
		{"string_too_short", `{"prompt":""}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "String should have at least 1 character", "type": "string_too_short",
				"ctx": map[string]any{"min_length": 1.0}, "input": ""}}},
		{"string_too_long counts runes", `{"prompt":"ééééééééééééééééééééé"}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "String should have at most 20 characters", "type": "string_too_long",
				"ctx": map[string]any{"max_length": 20.0}, "input": "ééééééééééééééééééééé"}}},
		{"string_pattern_mismatch in array", `{"prompt":"a","tags":["ok","NO"]}`, []map[string]any{
			{"loc": []any{"body", "tags", 1.0}, "msg": "String should match pattern '^[a-z]+$'", "type": "string_pattern_mismatch",
				"ctx": map[string]any{"pattern": "^[a-z]+$"}, "input": "NO"}}},
		{"too_short", `{"prompt":"a","tags":[]}`, []map[string]any{
			{"loc": []any{"body", "tags"}, "msg": "List should have at least 1 item after validation, not 0", "type": "too_short",
				"ctx": map[string]any{"field_type": "List", "min_length": 1.0, "actual_length": 0.0}, "input": []any{}}}},
		{"too_long", `{"prompt":"a","tags":["a","b","c","d"]}`, []map[string]any{
			{"loc": []any{"body", "tags"}, "msg": "List should have at most 3 items after validation, not 4", "type": "too_long",
				"ctx": map[string]any{"field_type": "List", "max_length": 3.0, "actual_length": 4.0}, "input": []any{"a", "b", "c", "d"}}}},
		{"extra_forbidden sorted", `{"prompt":"a","zz":1,"aa":true}`, []map[string]any{
			{"loc": []any{"body", "aa"}, "msg": "Extra inputs are not permitted", "type": "extra_forbidden", "input": true},
			{"loc": []any{"body", "zz"}, "msg": "Extra inputs are not permitted", "type": "extra_forbidden", "input": 1.0}}},
		{"additionalProperties schema", `{"prompt":"a","meta":{"a":1,"b":"x"}}`, []map[string]any{
			{"loc": []any{"body", "meta", "b"}, "msg": "Input should be a valid integer", "type": "int_type", "input": "x"}}},
		{"url_parsing", `{"prompt":"a","image_url":"not a url"}`, []map[string]any{
			{"loc": []any{"body", "image_url"}, "msg": "Input should be a valid URL", "type": "url_parsing", "input": "not a url"}}},
		{"ref in array items, nested missing", `{"prompt":"a","loras":[{"path":"x"},{"scale":9}]}`, []map[string]any{
			{"loc": []any{"body", "loras", 1.0, "path"}, "msg": "Field required", "type": "missing", "input": map[string]any{"scale": 9.0}},
			{"loc": []any{"body", "loras", 1.0, "scale"}, "msg": "Input should be less than or equal to 4", "type": "less_than_equal",
				"ctx": map[string]any{"le": 4.0}, "input": 9.0}}},
		{"anyOf reports closest branch", `{"prompt":"a","size_or_preset":{"width":10,"height":64}}`, []map[string]any{
			{"loc": []any{"body", "size_or_preset", "width"}, "msg": "Input should be greater than or equal to 64", "type": "greater_than_equal",
				"ctx": map[string]any{"ge": 64.0}, "input": 10.0}}},
		{"recursive schema", `{"prompt":"a","tree":{"children":[{"children":[{"name":3}]}]}}`, []map[string]any{
			{"loc": []any{"body", "tree", "children", 0.0, "children", 0.0, "name"}, "msg": "Input should be a valid string", "type": "string_type", "input": 3.0}}},
		{"errors in declaration order", `{"sync_mode":"x","prompt":1}`, []map[string]any{
			{"loc": []any{"body", "prompt"}, "msg": "Input should be a valid string", "type": "string_type", "input": 1.0},
			{"loc": []any{"body", "sync_mode"}, "msg": "Input should be a valid boolean", "type": "bool_type", "input": "x"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := v.ValidateJSON([]byte(tc.body))
			if err != nil {
				t.Fatalf("ValidateJSON: %v", err)
			}
			got := roundTrip(t, d)
			if len(tc.want) == 0 && len(got) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tc.want) {
				gb, _ := json.Marshal(got)
				wb, _ := json.Marshal(tc.want)
				t.Fatalf("details\n got %s\nwant %s", gb, wb)
			}
		})
	}
}

func TestNonObjectBody(t *testing.T) {
	v := mustCompile(t, "testdata/flux.json")
	for _, body := range []string{`[]`, `"x"`, `3`, `null`, `true`} {
		d, err := v.ValidateJSON([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		if len(d) != 1 || d[0].Type != "dict_type" || !reflect.DeepEqual(d[0].Loc, []any{"body"}) {
			t.Fatalf("%s: got %+v", body, d)
		}
	}
}

func TestMalformedBody(t *testing.T) {
	v := mustCompile(t, "testdata/flux.json")
	for _, body := range []string{``, `{`, `{"a":1} x`, `{"a":}`} {
		if _, err := v.ValidateJSON([]byte(body)); err == nil || !strings.Contains(err.Error(), ErrMalformed.Error()) {
			t.Fatalf("%q: want ErrMalformed, got %v", body, err)
		}
	}
}

func TestValidateAcceptsFloat64Bodies(t *testing.T) {
	v := mustCompile(t, "testdata/flux.json")
	var body any
	if err := json.Unmarshal([]byte(`{"prompt":"a","num_images":9,"output_format":"png"}`), &body); err != nil {
		t.Fatal(err)
	}
	d := v.Validate(body)
	if len(d) != 1 || d[0].Type != "less_than_equal" {
		t.Fatalf("got %+v", d)
	}
}

func TestMaxErrorsBound(t *testing.T) {
	v := mustCompile(t, "testdata/flux.json")
	var b strings.Builder
	b.WriteString(`{"prompt":"a"`)
	for i := 0; i < 500; i++ {
		b.WriteString(`,"x` + strings.Repeat("y", i%7) + string(rune('a'+i%26)) + string(rune('a'+i/26)) + `":1`)
	}
	b.WriteString(`}`)
	d, err := v.ValidateJSON([]byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != DefaultMaxErrors {
		t.Fatalf("got %d details, want %d", len(d), DefaultMaxErrors)
	}
}

func TestCompileFindsSchema(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		body    string
		wantErr string // compile error substring
		wantTyp string // first detail type, "" for valid
	}{
		{"components Input fallback", `{"components":{"schemas":{"Input":{"type":"object","required":["a"]}}}}`, `{}`, "", "missing"},
		{"inline post schema", `{"paths":{"/x":{"post":{"requestBody":{"content":{"application/json":{"schema":{"type":"object","properties":{"n":{"type":"integer"}}}}}}}}}}`,
			`{"n":"1"}`, "", "int_type"},
		{"requestBody by ref", `{"paths":{"/x":{"post":{"requestBody":{"$ref":"#/components/requestBodies/B"}}}},
			"components":{"requestBodies":{"B":{"content":{"application/json":{"schema":{"type":"object","required":["q"]}}}}}}}`, `{}`, "", "missing"},
		{"two posts without Input", `{"paths":{"/a":{"post":{}},"/b":{"post":{}}}}`, ``, "no request schema", ""},
		{"two posts with Input", `{"paths":{"/a":{"post":{}},"/b":{"post":{}}},"components":{"schemas":{"Input":{"type":"object"}}}}`, `{"a":1}`, "", ""},
		{"not json", `{`, ``, "not valid JSON", ""},
		{"not object", `[]`, ``, "not a JSON object", ""},
		{"external ref", `{"components":{"schemas":{"Input":{"$ref":"other.json#/X"}}}}`, ``, "only local references", ""},
		{"dangling ref", `{"components":{"schemas":{"Input":{"$ref":"#/components/schemas/Nope"}}}}`, ``, "does not resolve", ""},
		{"self cycle", `{"components":{"schemas":{"Input":{"$ref":"#/components/schemas/A"},"A":{"allOf":[{"$ref":"#/components/schemas/A"}]}}}}`, ``, "recurses into itself", ""},
		{"cycle through data is fine", `{"components":{"schemas":{"Input":{"$ref":"#/components/schemas/A"},
			"A":{"allOf":[{"$ref":"#/components/schemas/B"}]},"B":{"type":"object","properties":{"x":{"$ref":"#/components/schemas/A"}}}}}}`,
			`{"x":{"x":3}}`, "", "dict_type"},
		{"unknown type", `{"components":{"schemas":{"Input":{"type":"thing"}}}}`, ``, "unknown type", ""},
		{"bad minLength", `{"components":{"schemas":{"Input":{"type":"string","minLength":-1}}}}`, ``, "minLength", ""},
		{"false schema", `{"components":{"schemas":{"Input":{"type":"object","properties":{"no":false}}}}}`, `{"no":1}`, "", "value_error"},
		{"oneOf ambiguity", `{"components":{"schemas":{"Input":{"type":"object","properties":{"v":{"oneOf":[{"type":"integer"},{"type":"number"}]}}}}}}`,
			`{"v":1}`, "", "value_error"},
		{"oneOf single match", `{"components":{"schemas":{"Input":{"type":"object","properties":{"v":{"oneOf":[{"type":"integer"},{"type":"string"}]}}}}}}`,
			`{"v":1}`, "", ""},
		{"draft4 exclusive bool", `{"components":{"schemas":{"Input":{"type":"object","properties":{"v":{"type":"number","minimum":1,"exclusiveMinimum":true}}}}}}`,
			`{"v":1}`, "", "greater_than"},
		{"required not declared", `{"components":{"schemas":{"Input":{"type":"object","required":["z"]}}}}`, `{"a":1}`, "", "missing"},
		{"enum of numbers", `{"components":{"schemas":{"Input":{"type":"object","properties":{"v":{"enum":[1,2]}}}}}}`, `{"v":2.0}`, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Compile([]byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("want error containing %q, got %v", tc.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Compile: %v", err)
			}
			d, err := v.ValidateJSON([]byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.wantTyp == "" && len(d) != 0:
				t.Fatalf("want valid, got %+v", d)
			case tc.wantTyp != "" && (len(d) == 0 || d[0].Type != tc.wantTyp):
				t.Fatalf("want %s, got %+v", tc.wantTyp, d)
			}
		})
	}
}

func TestExpectedRendering(t *testing.T) {
	got := expected([]any{"a", 1.0, true, nil, 2.5})
	if want := "'a', 1, True, None or 2.5"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}
