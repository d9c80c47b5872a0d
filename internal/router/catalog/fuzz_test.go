package catalog

import (
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"
)

// FuzzPage opens client cursors: anything but a cursor this catalog issued
// for this audience is ErrBadCursor, and a page is at most limit models,
// visible to the audience, in id order, after the cursor's position.
func FuzzPage(f *testing.F) {
	c := mixedCatalog(f, 20, 20, testKey)
	open := c.Visible(nil)
	secret := c.Visible([]string{"secret"})
	p, err := c.Page(open, "", 3)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(p.NextCursor, false, 3)
	f.Add(p.NextCursor, true, 3)
	f.Add(p.NextCursor[:len(p.NextCursor)-1]+"A", false, 0)
	f.Add("", true, -1)
	f.Add("AQ", false, 1000)
	f.Add(strings.Repeat("A", MaxCursorLen+1), false, 5)
	f.Fuzz(func(t *testing.T, cursor string, isSecret bool, limit int) {
		aud := open
		if isSecret {
			aud = secret
		}
		page, err := c.Page(aud, cursor, limit)
		if err != nil {
			if !errors.Is(err, ErrBadCursor) {
				t.Fatalf("Page(%q) refused with %v, not ErrBadCursor", cursor, err)
			}
			return
		}
		if len(page.Models) > page.Limit || page.Limit != ClampLimit(limit) {
			t.Fatalf("%d models on a page of limit %d (asked %d)", len(page.Models), page.Limit, limit)
		}
		if !sort.SliceIsSorted(page.Models, func(i, j int) bool { return page.Models[i].ID < page.Models[j].ID }) {
			t.Fatal("page not in id order")
		}
		for _, m := range page.Models {
			if !aud.Sees(m) {
				t.Fatalf("page shows %s, which the audience does not see", m.ID)
			}
		}
		if page.HasMore != (page.NextCursor != "") {
			t.Fatalf("has_more %v with cursor %q", page.HasMore, page.NextCursor)
		}
	})
}

// FuzzAudience: two entitlement lists share a cursor key (hash) exactly
// when they hold the same entitlements.
func FuzzAudience(f *testing.F) {
	f.Add("a\x00b", "a\nb", "\x00", "\n")
	f.Add("secret", "", "", "secret")
	f.Fuzz(func(t *testing.T, a, b, sepA, sepB string) {
		la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
		if sepA != "" {
			la = strings.Split(a, sepA)
		}
		if sepB != "" {
			lb = strings.Split(b, sepB)
		}
		set := func(l []string) []string {
			out := slices.DeleteFunc(slices.Clone(l), func(s string) bool { return s == "" })
			slices.Sort(out)
			return slices.Compact(out)
		}
		same := slices.Equal(set(la), set(lb))
		if (NewAudience(la).hash == NewAudience(lb).hash) != same {
			t.Fatalf("audiences %q and %q: same set %v, same hash %v", la, lb, same, !same)
		}
	})
}

// TestAudienceHashSeparates: found writing FuzzAudience (its first seed): the entitlements were
// joined with NUL before hashing, so ["a\x00b"] and ["a", "b"] shared
// cursors.
func TestAudienceHashSeparates(t *testing.T) {
	if NewAudience([]string{"a\x00b"}).hash == NewAudience([]string{"a", "b"}).hash {
		t.Fatal(`["a\x00b"] and ["a", "b"] hash alike`)
	}
}
