package rehost

import (
	"encoding/json"
	"reflect"
	"sort"
	"strings"
	"testing"
)

func TestParsePathErrors(t *testing.T) {
	for _, s := range []string{"", "$.", "a..b", "a.", "a[", "a[x]", "a[-1]", "a[01]", "a]b", `a["x]`, "a[0]b", ".a"} {
		if _, err := ParsePath(s); err == nil {
			t.Errorf("ParsePath(%q) accepted", s)
		}
	}
}

func TestPathWalkRewrite(t *testing.T) {
	const doc = `{
		"result": {"sample": "https://p/1.png", "n": 3},
		"images": [{"url": "https://p/a"}, {"url": "https://p/b"}, {"url": 7}, "x"],
		"data": {"x": "u1", "y": ["u2"]},
		"odd.name": {"url": "u3"},
		"b64": ["AAA", "BBB"]
	}`
	for _, tc := range []struct {
		path string
		want []string // values visited, sorted
	}{
		{"result.sample", []string{"https://p/1.png"}},
		{"$.result.sample", []string{"https://p/1.png"}},
		{"result.n", nil},       // not a string
		{"result.missing", nil}, // absent
		{"result[0]", nil},      // object indexed as an array
		{"images.url", nil},     // array read as an object
		{"images[*].url", []string{"https://p/a", "https://p/b"}},
		{"images[1].url", []string{"https://p/b"}},
		{"images[9].url", nil},
		{"images[3]", []string{"x"}},
		{"data.*", []string{"u1"}},
		{"data.y[*]", []string{"u2"}},
		{`["odd.name"].url`, []string{"u3"}},
		{`['odd.name'].url`, []string{"u3"}},
		{"b64[*]", []string{"AAA", "BBB"}},
		{"[0]", nil},
	} {
		t.Run(tc.path, func(t *testing.T) {
			p, err := ParsePath(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatal(err)
			}
			var got []string
			p.Walk(v, func(s string, set func(string)) {
				got = append(got, s)
				set("gw:" + s)
			})
			sort.Strings(got)
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("visited %q, want %q", got, tc.want)
			}
			// Every visited value was rewritten in place, nothing else.
			out, _ := json.Marshal(v)
			if n := strings.Count(string(out), `"gw:`); n != len(tc.want) {
				t.Fatalf("%d rewritten members in %s, want %d", n, out, len(tc.want))
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), `"gw:`+w+`"`) {
					t.Fatalf("%s lacks the rewrite of %q", out, w)
				}
			}
		})
	}
}
