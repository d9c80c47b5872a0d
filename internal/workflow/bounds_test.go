package workflow

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
)

// Hostile bodies are generated here, never stored in testdata.

func bigStringBody(size int) []byte {
	const head, tail = `{"workflow": {"1": {"class_type": "SaveImage", "inputs": {"filename_prefix": "`, `"}}}}`
	return []byte(head + strings.Repeat("a", size-len(head)-len(tail)) + tail)
}

func deepBody(depth int) []byte {
	return []byte(`{"workflow": {"1": {"class_type": "X", "inputs": {"a": ` +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) + `}}}}`)
}

func manyNodesBody(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"workflow": {"0": {"class_type": "LoadImage", "inputs": {"image": "cat.png"}}`)
	for i := 1; i < n; i++ {
		fmt.Fprintf(&b, `,"%d":{"class_type":"ImageInvert","inputs":{"image":["%d",0]}}`, i, i-1)
	}
	b.WriteString("}}")
	return []byte(b.String())
}

// TestHostileBodiesBoundedAllocation proves that each hostile body is refused
// by the byte scan before anything proportional to it is built: a handful of
// allocations and a few KiB, whatever the body's size. Bounds are generous;
// a decode of any of these bodies would cost megabytes.
func TestHostileBodiesBoundedAllocation(t *testing.T) {
	raised := DefaultLimits()
	raised.MaxBodyBytes = 16 << 20
	tests := []struct {
		name      string
		body      []byte
		lim       Limits
		status    int
		code      string
		wantLimit string
	}{
		{"10 MiB body", bigStringBody(10 << 20), DefaultLimits(), http.StatusRequestEntityTooLarge, "payload_too_large", ""},
		{"10 MiB string under a raised body cap", bigStringBody(10 << 20), raised, http.StatusUnprocessableEntity, "invalid_workflow", "max_string_bytes"},
		{"10 000-deep nesting", deepBody(10000), DefaultLimits(), http.StatusUnprocessableEntity, "invalid_workflow", "max_depth"},
		{"100 000-node graph", manyNodesBody(100000), DefaultLimits(), http.StatusUnprocessableEntity, "invalid_workflow", "max_nodes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.code != "payload_too_large" && int64(len(tc.body)) > tc.lim.MaxBodyBytes {
				t.Fatalf("fixture is %d bytes, over the body cap; it would not exercise the scan", len(tc.body))
			}
			_, err := ParseSubmit(tc.body, tc.lim)
			ae := wantAPIError(t, err, tc.status, tc.code)
			if tc.wantLimit != "" && ae.Details["limit"] != tc.wantLimit {
				t.Fatalf("details.limit = %v, want %s", ae.Details["limit"], tc.wantLimit)
			}

			allocs := testing.AllocsPerRun(5, func() { _, _ = ParseSubmit(tc.body, tc.lim) })
			if allocs > 16 {
				t.Errorf("%.0f allocations per refusal, want ≤ 16", allocs)
			}
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < 5; i++ {
				_, _ = ParseSubmit(tc.body, tc.lim)
			}
			runtime.ReadMemStats(&after)
			if perRun := (after.TotalAlloc - before.TotalAlloc) / 5; perRun > 64<<10 {
				t.Errorf("%d bytes allocated per refusal of a %d-byte body, want ≤ 64 KiB", perRun, len(tc.body))
			}
		})
	}
}

func BenchmarkRefuseDeepNesting(b *testing.B) {
	body := deepBody(10000)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ParseSubmit(body, DefaultLimits()); err == nil {
			b.Fatal("accepted")
		}
	}
}

func BenchmarkRefuse100kNodes(b *testing.B) {
	body := manyNodesBody(100000)
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		if _, err := ParseSubmit(body, DefaultLimits()); err == nil {
			b.Fatal("accepted")
		}
	}
}

// BenchmarkParseAndValidate is the cost a normal submit pays.
func BenchmarkParseAndValidate(b *testing.B) {
	cat := loadCatalog(b)
	body := []byte(`{"workflow": ` + validWorkflow + `}`)
	b.ReportAllocs()
	for b.Loop() {
		sub, err := ParseSubmit(body, DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		if err := Validate(sub.Workflow, cat); err != nil {
			b.Fatal(err)
		}
	}
}

// chainBody is a 12-node submit like the submit-throughput bench's: a
// load, ten alternating inverts and scales (links, combos, numbers), a save.
func chainBody() []byte {
	var b strings.Builder
	b.WriteString(`{"workflow":{"1":{"class_type":"LoadImage","inputs":{"image":"cat.png"}}`)
	prev := "1"
	for i := 2; i <= 11; i++ {
		if i%2 == 0 {
			fmt.Fprintf(&b, `,"%d":{"class_type":"ImageInvert","inputs":{"image":["%s",0]}}`, i, prev)
		} else {
			fmt.Fprintf(&b, `,"%d":{"class_type":"ImageScale","inputs":{"image":["%s",0],"upscale_method":"bilinear","width":8,"height":8,"crop":"disabled"}}`, i, prev)
		}
		prev = fmt.Sprint(i)
	}
	fmt.Fprintf(&b, `,"900":{"class_type":"SaveImage","inputs":{"images":["%s",0],"filename_prefix":"bench"}}}}`, prev)
	return []byte(b.String())
}

// BenchmarkParseAndValidateChain is the submit bench's per-request graph work.
func BenchmarkParseAndValidateChain(b *testing.B) {
	cat := loadCatalog(b)
	body := chainBody()
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		sub, err := ParseSubmit(body, DefaultLimits())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := AssetRefs(sub.Workflow, cat); err != nil {
			b.Fatal(err)
		}
		if err := Validate(sub.Workflow, cat, WithResolvedInputs(map[InputKey]bool{{Node: "1", Input: "image"}: true})); err != nil {
			b.Fatal(err)
		}
	}
}
