package schema

import (
	"encoding/json"
	"testing"
)

var benchBody = []byte(`{"prompt":"a cat in a hat","num_images":2,"guidance_scale":3.5,
	"image_size":{"width":1024,"height":768},"seed":42,"sync_mode":false,"output_format":"png",
	"tags":["cat","hat"],"image_url":"https://example.com/cat.png","loras":[{"path":"x","scale":1}]}`)

// BenchmarkValidate measures the hot-path cost of checking an already decoded
// valid body (what the handler pays on top of parsing).
func BenchmarkValidate(b *testing.B) {
	v := mustCompile(b, "testdata/flux.json")
	var body any
	if err := json.Unmarshal(benchBody, &body); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := v.Validate(body); d != nil {
			b.Fatalf("unexpected details %+v", d)
		}
	}
}

// BenchmarkValidateJSON includes decoding the body.
func BenchmarkValidateJSON(b *testing.B) {
	v := mustCompile(b, "testdata/flux.json")
	b.ReportAllocs()
	for b.Loop() {
		if d, err := v.ValidateJSON(benchBody); err != nil || d != nil {
			b.Fatalf("unexpected %v %+v", err, d)
		}
	}
}

// BenchmarkValidateInvalid measures a body with a few errors.
func BenchmarkValidateInvalid(b *testing.B) {
	v := mustCompile(b, "testdata/flux.json")
	var body any
	if err := json.Unmarshal([]byte(`{"num_images":9,"tags":["A"],"extra":1}`), &body); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if d := v.Validate(body); len(d) != 4 {
			b.Fatalf("got %d details", len(d))
		}
	}
}
