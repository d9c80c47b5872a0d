package jsonsyntax

import (
	"encoding/json"
	"math/rand/v2"
	"strings"
	"testing"
)

var seeds = []string{
	``, ` `, `0`, `-0`, `01`, `-`, `1.`, `1.5`, `1e5`, `1E+5`, `1e-5`, `1e`, `.5`, `+1`, `-01`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `True`, `""`, `"a"`, `"\u00e9"`, `"\u00g9"`,
	`"\x"`, `"\/\b\f\n\r\t\"\\"`, `"` + "\x01" + `"`, `"` + "\xff\xfe" + `"`, `"unterminated`,
	`[]`, `[ ]`, `[1,]`, `[,1]`, `[1 2]`, `[1,2]`, `{}`, `{ }`, `{"a":1}`, `{"a":1,}`, `{"a" 1}`,
	`{a:1}`, `{"a":}`, `{"a":1 "b":2}`, `{"a":[1,{"b":null}],"c":"d"}`, `]`, `}`, `[}`, `{]`,
	`[[[]]]`, `[[[]]`, `1 2`, ` {"a":1} `, "\t\n\r[1]\n", `{"workflow":{"1":{"class_type":"X","inputs":{"a":["2",0]}}}}`,
	`"\u12"`, `"\u123"`, `"\u1234"`, `[1e]`, `[-]`, `[0.e1]`, `[0.1e1]`, `[1E-]`,
}

func check(t *testing.T, s string) {
	t.Helper()
	if got, want := Valid([]byte(s)), json.Valid([]byte(s)); got != want {
		t.Fatalf("Valid(%q) = %v, json.Valid %v", s, got, want)
	}
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	for _, s := range seeds {
		check(t, s)
	}
	// Random edits of the seeds: a byte replaced, inserted or removed.
	alphabet := []byte(`{}[],:"\ 0123456789-+.eEtrufalsn` + "\t\n\x01\xff")
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200000 {
		b := []byte(seeds[rng.IntN(len(seeds))])
		for range 1 + rng.IntN(3) {
			p := 0
			if len(b) > 0 {
				p = rng.IntN(len(b) + 1)
			}
			c := alphabet[rng.IntN(len(alphabet))]
			switch op := rng.IntN(3); {
			case op == 0 && p < len(b):
				b[p] = c
			case op == 1 && p < len(b):
				b = append(b[:p], b[p+1:]...)
			default:
				b = append(b[:p], append([]byte{c}, b[p:]...)...)
			}
		}
		check(t, string(b))
	}
}

func TestDepthLimit(t *testing.T) {
	for _, n := range []int{9999, 10000, 10001} {
		check(t, strings.Repeat("[", n)+strings.Repeat("]", n))
		check(t, strings.Repeat(`{"a":`, n)+"1"+strings.Repeat("}", n))
	}
}

func FuzzValid(f *testing.F) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := Valid(b), json.Valid(b); got != want {
			t.Fatalf("Valid(%q) = %v, json.Valid %v", b, got, want)
		}
	})
}

func BenchmarkValid(b *testing.B) {
	doc := []byte(`{"workflow":{"1":{"class_type":"EmptyImage","inputs":{"width":8,"height":8,"batch_size":1,"color":0}},` +
		`"2":{"class_type":"ImageInvert","inputs":{"image":["1",0]}},"3":{"class_type":"ImageFlip","inputs":{"image":["2",0],"flip_method":"x-axis: vertically"}},` +
		`"900":{"class_type":"SaveImage","inputs":{"filename_prefix":"bench","images":["3",0]}}}}`)
	b.Run("jsonsyntax", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			Valid(doc)
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			json.Valid(doc)
		}
	})
}
