package catalog

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
)

var testKey = []byte("0123456789abcdef0123456789abcdef")

// mixedCatalog has `open` models visible to everyone and `secret` models in
// the "secret" group, interleaved in id order.
func mixedCatalog(t testing.TB, open, secret int, key []byte) *Catalog {
	t.Helper()
	var ms []Model
	for i := 0; i < open; i++ {
		ms = append(ms, Model{ID: fmt.Sprintf("prov%d/model-%03d", i%3, i*2), Adapter: AdapterHTTP, Upstream: "https://x.example"})
	}
	for i := 0; i < secret; i++ {
		ms = append(ms, Model{ID: fmt.Sprintf("prov%d/model-%03d", i%3, i*2+1), Adapter: AdapterHTTP,
			Upstream: "https://x.example", Entitlement: "secret"})
	}
	c, err := New(ms, Options{CursorKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// walk pages through the catalog and returns every id served.
func walk(t *testing.T, c *Catalog, aud Audience, limit int) (ids []string, pages int) {
	t.Helper()
	cursor := ""
	for {
		p, err := c.Page(aud, cursor, limit)
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(p.Models) > p.Limit {
			t.Fatalf("page %d has %d models, over limit %d", pages, len(p.Models), p.Limit)
		}
		for _, m := range p.Models {
			ids = append(ids, m.ID)
		}
		if !p.HasMore {
			if p.NextCursor != "" {
				t.Fatal("next_cursor set on the last page")
			}
			return ids, pages
		}
		if p.NextCursor == "" {
			t.Fatal("has_more without next_cursor")
		}
		cursor = p.NextCursor
		if pages > 1000 {
			t.Fatal("walk does not end")
		}
	}
}

func TestWalkVisitsEachEntitledModelOnce(t *testing.T) {
	c := mixedCatalog(t, 23, 9, testKey)
	tests := []struct {
		name       string
		aud        Audience
		limit      int
		wantModels int
		wantPages  int
	}{
		{"limit 7 over 23 entitled", NewAudience(nil), 7, 23, 4},
		{"limit 7 with the secret group", NewAudience([]string{"secret", "secret", "other"}), 7, 32, 5},
		{"limit 1", NewAudience([]string{"x"}), 1, 23, 23},
		{"exact multiple", NewAudience(nil), 23, 23, 1},
		{"default limit", NewAudience(nil), 0, 23, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ids, pages := walk(t, c, tc.aud, tc.limit)
			if len(ids) != tc.wantModels || pages != tc.wantPages {
				t.Fatalf("got %d models in %d pages, want %d in %d", len(ids), pages, tc.wantModels, tc.wantPages)
			}
			seen := map[string]bool{}
			for i, id := range ids {
				if seen[id] {
					t.Fatalf("%s served twice", id)
				}
				seen[id] = true
				if i > 0 && ids[i-1] >= id {
					t.Fatalf("not sorted: %s before %s", ids[i-1], id)
				}
				m, _ := c.Lookup(id)
				if !tc.aud.Sees(m) {
					t.Fatalf("%s served to an audience that cannot see it", id)
				}
			}
			for _, m := range c.Models() {
				if tc.aud.Sees(m) && !seen[m.ID] {
					t.Fatalf("%s never served", m.ID)
				}
			}
		})
	}
}

func TestLimitRules(t *testing.T) {
	c := mixedCatalog(t, 150, 0, testKey)
	tests := []struct {
		limit, want int
	}{{1000, 100}, {101, 100}, {100, 100}, {0, 20}, {-5, 20}, {1, 1}, {37, 37}}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.limit), func(t *testing.T) {
			p, err := c.Page(NewAudience(nil), "", tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			if p.Limit != tc.want || len(p.Models) != tc.want || !p.HasMore {
				t.Fatalf("limit %d: served %d models, Limit %d, has_more %v; want %d", tc.limit, len(p.Models), p.Limit, p.HasMore, tc.want)
			}
		})
	}
}

func TestEmptyAndInvisibleCatalog(t *testing.T) {
	c := mixedCatalog(t, 0, 5, testKey)
	p, err := c.Page(NewAudience(nil), "", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Models) != 0 || p.HasMore || p.NextCursor != "" || p.Limit != 10 {
		t.Fatalf("got %+v", p)
	}
}

// TestHasMoreIsExact: when the only models after a page are invisible, the
// page is the last one.
func TestHasMoreIsExact(t *testing.T) {
	ms := []Model{
		{ID: "a/1", Adapter: AdapterHTTP, Upstream: "https://x.example"},
		{ID: "a/2", Adapter: AdapterHTTP, Upstream: "https://x.example"},
		{ID: "a/3", Adapter: AdapterHTTP, Upstream: "https://x.example", Entitlement: "hidden"},
	}
	c, err := New(ms, Options{CursorKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Page(NewAudience(nil), "", 2)
	if err != nil {
		t.Fatal(err)
	}
	if p.HasMore || len(p.Models) != 2 {
		t.Fatalf("got has_more=%v with %d models", p.HasMore, len(p.Models))
	}
}

func TestCursorRefusals(t *testing.T) {
	c := mixedCatalog(t, 23, 4, testKey)
	aud := NewAudience(nil)
	first, err := c.Page(aud, "", 7)
	if err != nil {
		t.Fatal(err)
	}
	good := first.NextCursor
	if !regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`).MatchString(good) || len(good) > MaxCursorLen {
		t.Fatalf("cursor %q breaks the contract's pattern", good)
	}
	flip := func(s string, i int) string {
		b := []byte(s)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	changed := mixedCatalog(t, 24, 4, testKey)      // one more model: new version
	rebuilt := mixedCatalog(t, 23, 4, testKey)      // same content, same key
	otherKey := mixedCatalog(t, 23, 4, []byte("k")) // same content, other key
	tests := []struct {
		name    string
		c       *Catalog
		aud     Audience
		cursor  string
		wantErr string // "" = accepted
	}{
		{"genuine", c, aud, good, ""},
		{"same content rebuilt with the same key", rebuilt, aud, good, ""},
		{"tampered first byte", c, aud, flip(good, 0), "invalid"},
		{"tampered middle", c, aud, flip(good, len(good)/2), "signature mismatch"},
		{"tampered mac", c, aud, flip(good, len(good)-2), "signature mismatch"},
		{"truncated", c, aud, good[:20], "wrong length"},
		{"not base64", c, aud, "abc*def", "not a cursor"},
		{"bad padding", c, aud, "a", "not base64url"},
		{"too long", c, aud, strings.Repeat("A", 513), "not a cursor"},
		{"an id is not a cursor", c, aud, "prov0/model-000", "invalid"},
		{"stale after catalog change", changed, aud, good, "another catalog version"},
		{"other signing key", otherKey, aud, good, "signature mismatch"},
		{"other entitlement set", c, NewAudience([]string{"secret"}), good, "signature mismatch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Page(tc.aud, tc.cursor, 7)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrBadCursor) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("want ErrBadCursor containing %q, got %v", tc.wantErr, err)
			}
		})
	}
}

func TestCursorLengthWithLongestID(t *testing.T) {
	id := strings.Repeat("p", 64) + "/" + strings.Repeat("m", 128)
	ms := []Model{
		{ID: id, Adapter: AdapterHTTP, Upstream: "https://x.example"},
		{ID: "zz/last", Adapter: AdapterHTTP, Upstream: "https://x.example"},
	}
	c, err := New(ms, Options{CursorKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.Page(NewAudience(nil), "", 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(p.NextCursor); n == 0 || n > MaxCursorLen {
		t.Fatalf("cursor length %d", n)
	}
	p2, err := c.Page(NewAudience(nil), p.NextCursor, 1)
	if err != nil || len(p2.Models) != 1 || p2.Models[0].ID != "zz/last" {
		t.Fatalf("second page: %v %+v", err, p2)
	}
}

func TestSuggest(t *testing.T) {
	ms := []Model{
		{ID: "fal/flux-dev", Adapter: AdapterFal, Upstream: "https://x.example"},
		{ID: "fal/flux-pro", Adapter: AdapterFal, Upstream: "https://x.example"},
		{ID: "fal/flux-schnell", Adapter: AdapterFal, Upstream: "https://x.example"},
		{ID: "fal/flux-secret", Adapter: AdapterFal, Upstream: "https://x.example", Entitlement: "vip"},
		{ID: "bfl/flux-dev", Adapter: AdapterBFL, Upstream: "https://x.example"},
		{ID: "openai/gpt-image-1", Adapter: AdapterHTTP, Upstream: "https://x.example"},
	}
	c, err := New(ms, Options{CursorKey: testKey})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, id string
		aud      Audience
		n        int
		want     []string
	}{
		{"typo", "fal/flux-devv", NewAudience(nil), 3, []string{"fal/flux-dev", "bfl/flux-dev", "fal/flux-pro"}},
		{"wrong provider", "fol/flux-dev", NewAudience(nil), 2, []string{"fal/flux-dev", "bfl/flux-dev"}},
		{"case and slashes", "/FAL/Flux-Pro/", NewAudience(nil), 1, []string{"fal/flux-pro"}},
		{"invisible never suggested", "fal/flux-secre", NewAudience(nil), 3, []string{"fal/flux-dev", "fal/flux-pro", "fal/flux-schnell"}},
		{"visible with entitlement", "fal/flux-secre", NewAudience([]string{"vip"}), 1, []string{"fal/flux-secret"}},
		{"nothing close", "acme/thing", NewAudience(nil), 3, []string{}},
		{"n zero", "fal/flux-dev", NewAudience(nil), 0, nil},
		{"huge input", strings.Repeat("x", 10000), NewAudience(nil), 3, []string{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := c.Suggest(tc.id, tc.aud, tc.n)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) || len(got) > tc.n {
				t.Fatalf("got %v want %v", got, tc.want)
			}
		})
	}
}

// TestAllowsMatchesSees: the per-call check agrees with the audience's.
func TestAllowsMatchesSees(t *testing.T) {
	models := []*Model{{ID: "a/open"}, {ID: "a/beta", Entitlement: "beta"}, {ID: "a/vip", Entitlement: "vip"}}
	for _, ents := range [][]string{nil, {}, {""}, {"beta"}, {"vip", "beta", "beta"}, {"other"}} {
		aud := NewAudience(ents)
		for _, m := range models {
			if got, want := Allows(ents, m), aud.Sees(m); got != want {
				t.Errorf("entitlements %q, model %s: Allows %v, Sees %v", ents, m.ID, got, want)
			}
		}
	}
}
