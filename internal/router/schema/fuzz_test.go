package schema

import (
	"encoding/json"
	"errors"
	"os"
	"testing"
)

// FuzzValidateJSON validates call bodies against the flux schema: a body
// that is not one JSON value is ErrMalformed; otherwise the details are
// capped, encode as the 422 body, and the same body always gets the same
// answer.
func FuzzValidateJSON(f *testing.F) {
	v := mustCompile(f, "testdata/flux.json")
	for _, s := range []string{`{"prompt":"a cat"}`, `{"prompt":"x","seed":-1e400}`, `{"prompt":"x","seed":1e400}`,
		`{"prompt":"x","width":9007199254740993}`, `{"prompt":1,"width":"w","steps":0.5}`, `[]`, `null`, `{"a":1} {}`,
		`{"prompt":"x","num_images":-0}`, `{"prompt":"x","guidance_scale":1E-400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d, err := v.ValidateJSON(raw)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ValidateJSON(%q): %v is not ErrMalformed", raw, err)
			}
			if json.Valid(raw) {
				t.Fatalf("ValidateJSON refused valid JSON %q", raw)
			}
			return
		}
		if len(d) > DefaultMaxErrors {
			t.Fatalf("%d details; the cap is %d", len(d), DefaultMaxErrors)
		}
		if _, err := json.Marshal(map[string]any{"detail": d}); err != nil {
			t.Fatalf("details of %q do not encode: %v", raw, err)
		}
		again, _ := v.ValidateJSON(raw)
		if len(again) != len(d) {
			t.Fatalf("%q: %d details, then %d", raw, len(d), len(again))
		}
	})
}

// FuzzCompile compiles catalog-supplied OpenAPI documents: a document
// either fails to compile or gives a validator that checks any body.
func FuzzCompile(f *testing.F) {
	doc, err := os.ReadFile("testdata/flux.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(doc, []byte(`{"prompt":"x"}`))
	f.Add([]byte(`{"components":{"schemas":{"Input":{"$ref":"#/components/schemas/Input"}}}}`), []byte(`{}`))
	f.Add([]byte(`{"components":{"schemas":{"Input":{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":-1}}}}}}`), []byte(`{"n":-1e400}`))
	f.Add([]byte(`{"components":{"schemas":{"Input":{"anyOf":[{"type":"string"},{"allOf":[{"$ref":"#/x"}]}]}}}}`), []byte(`"s"`))
	f.Fuzz(func(t *testing.T, doc, body []byte) {
		v, err := Compile(doc)
		if err != nil {
			return
		}
		d, err := v.ValidateJSON(body)
		if err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("ValidateJSON: %v", err)
		}
		if len(d) > DefaultMaxErrors {
			t.Fatalf("%d details", len(d))
		}
	})
}

// TestHugeNegativeFailsMinimum: a number literal below -MaxFloat64 was
// read as +Inf and passed every minimum (found writing FuzzValidateJSON).
func TestHugeNegativeFailsMinimum(t *testing.T) {
	v, err := Compile([]byte(`{"components":{"schemas":{"Input":{"type":"object","properties":{"n":{"type":"number","minimum":0}}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"-1e400", "-1e99999"} {
		d, err := v.ValidateJSON([]byte(`{"n":` + n + `}`))
		if err != nil || len(d) != 1 || d[0].Type != "greater_than_equal" {
			t.Errorf("n = %s: %+v, %v; want one greater_than_equal", n, d, err)
		}
	}
	if d, _ := v.ValidateJSON([]byte(`{"n":1e400}`)); len(d) != 0 {
		t.Errorf("n = 1e400 against minimum 0: %+v", d)
	}
}
