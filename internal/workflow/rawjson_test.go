package workflow

import (
	"encoding/json"
	"maps"
	"testing"
)

// The fast paths must answer exactly as json.Unmarshal, or decline.

var objectSeeds = []string{
	`{}`, ` { } `, `{"a":1}`, `{ "a" : 1 , "b" : [1, {"c": "]}"}] }`,
	`{"a":1,"a":2}`, `{"x":"a\"b","y":{"z":null}}`, `{"a":"\u00e9"}`,
	`{"é":1}`, `{"a\u0062":1}`, `{"a":true,"b":false,"c":-1.5e3}`,
	"{\n\t\"1\": {\"class_type\": \"X\", \"inputs\": {\"a\": [\"1\", 0]}}\r\n}",
	`{"a":"x\\"}`, `{"":""}`, `[1]`, `"s"`, `{"a":1}x`,
}

func FuzzObjectMembers(f *testing.F) {
	for _, s := range objectSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if !json.Valid(raw) {
			return // callers only pass valid JSON
		}
		got, ok := objectMembers(raw)
		var want map[string]json.RawMessage
		wantErr := json.Unmarshal(raw, &want)
		if !ok {
			return
		}
		if wantErr != nil {
			t.Fatalf("objectMembers(%q) accepted what json.Unmarshal refuses: %v", raw, wantErr)
		}
		if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Fatalf("objectMembers(%q) = %q, json.Unmarshal %q", raw, got, want)
		}
	})
}

func TestObjectMembersDeclines(t *testing.T) {
	for _, raw := range []string{`{"é":1}`, `{"a\u0062":1}`, `[1]`, `"s"`, `1`} {
		if _, ok := objectMembers([]byte(raw)); ok {
			t.Errorf("objectMembers(%s) handled it; want a fallback to json.Unmarshal", raw)
		}
	}
	m, ok := objectMembers([]byte(`{"a":1,"a":{"b":2}}`))
	if !ok || string(m["a"]) != `{"b":2}` || len(m) != 1 {
		t.Errorf("duplicate names: %q, %v; want the last", m, ok)
	}
}

func FuzzPlainString(f *testing.F) {
	for _, s := range []string{`"abc"`, `""`, `"a\"b"`, `"é"`, "\"\xff\"", `"a\nb"`, "\"\t\"", `"\u0041"`, `1`, `"x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := plainString(raw)
		if !ok {
			return
		}
		var want string
		if err := json.Unmarshal(raw, &want); err != nil || got != want {
			t.Fatalf("plainString(%q) = %q; json.Unmarshal %q, %v", raw, got, want, err)
		}
	})
}

func FuzzPlainLink(f *testing.F) {
	for _, s := range []string{`["1",0]`, `[ "12" , 3 ]`, `["1",01]`, `["1",-1]`, `["1",1.0]`, `["1",1e2]`,
		`["1",2147483647]`, `["1",2147483648]`, `["1",999999999]`, `["a\"b",0]`, `["1",0,2]`, `["1"]`, `[1,0]`, `["é",0]`, `["1",0]x`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 || raw[0] != '[' {
			return
		}
		got, ok := plainLink(raw)
		if !ok {
			return
		}
		want, kind := decodeLink(raw)
		if wantOK := kind == goodLink; !wantOK || got != want {
			t.Fatalf("plainLink(%q) = %+v; full decode %+v, %v", raw, got, want, wantOK)
		}
	})
}
