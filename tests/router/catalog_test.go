package router

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/tests/peers/partner"
)

// catalog23 is 23 models; every third one is in the "beta" group.
func catalog23(upstream string) []model {
	var ms []model
	for i := range 23 {
		m := model{ID: fmt.Sprintf("prov%d/model-%02d", i%4, i), Adapter: "http", Upstream: upstream, Price: 1}
		if i%3 == 0 {
			m.Entitlement = "beta"
		}
		if i == 0 {
			m.Schema = inputSchema
		}
		ms = append(ms, m)
	}
	return ms
}

type listPage struct {
	Data []struct {
		ID       string `json:"id"`
		Provider string `json:"provider"`
		Model    string `json:"model"`
		Billing  struct {
			Charges string `json:"charges_on_policy_rejection"`
		} `json:"billing"`
	} `json:"data"`
	HasMore    bool   `json:"has_more"`
	NextCursor string `json:"next_cursor"`
	Limit      int    `json:"limit"`
}

func list(t *testing.T, g *routerGateway, tok, query string) (listPage, response) {
	t.Helper()
	r := call(t, http.MethodGet, g.URL+"/v1/models"+query, tok, nil, nil)
	var p listPage
	if r.Status == 200 {
		if err := jsonUnmarshal(r.Body, &p); err != nil {
			t.Fatalf("list body %s: %v", r.Body, err)
		}
	}
	return p, r
}

// walk pages through the catalog with limit and returns the ids in order.
func walk(t *testing.T, g *routerGateway, tok string, limit int) []string {
	t.Helper()
	var ids []string
	cursor := ""
	for range 100 {
		q := fmt.Sprintf("?limit=%d", limit)
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		p, r := list(t, g, tok, q)
		if r.Status != 200 {
			t.Fatalf("page %s: %d %s", q, r.Status, r.Body)
		}
		if len(p.Data) > p.Limit || p.Limit != limit {
			t.Fatalf("page served %d items with limit %d (asked %d)", len(p.Data), p.Limit, limit)
		}
		for _, e := range p.Data {
			if e.ID != e.Provider+"/"+e.Model || e.Billing.Charges == "" {
				t.Errorf("malformed entry %+v", e)
			}
			ids = append(ids, e.ID)
		}
		if !p.HasMore {
			if p.NextCursor != "" {
				t.Errorf("last page carries next_cursor %q", p.NextCursor)
			}
			return ids
		}
		cursor = p.NextCursor
	}
	t.Fatal("walk did not end")
	return nil
}

func TestCatalogPaging(t *testing.T) {
	peer := partner.NewSyncJSON(t)
	models := catalog23(peer.URL)
	g := startRouter(t, embeddedBackend(), models, "")
	beta := token(t, claims{ws: "ws-cat", entitlements: []string{"beta"}})
	plain := token(t, claims{ws: "ws-cat"})

	for _, c := range []struct {
		name string
		tok  string
		want int
	}{{"entitled to beta", beta, 23}, {"no entitlements", plain, 15}} {
		t.Run("walk limit=7 "+c.name, func(t *testing.T) {
			ids := walk(t, g, c.tok, 7)
			seen := map[string]bool{}
			for _, id := range ids {
				if seen[id] {
					t.Errorf("%s visited twice", id)
				}
				seen[id] = true
			}
			if len(ids) != c.want {
				t.Errorf("visited %d models, want %d", len(ids), c.want)
			}
			for i, m := range models {
				if (m.Entitlement == "" || c.tok == beta) != seen[m.ID] {
					t.Errorf("model %d %s visible=%v", i, m.ID, seen[m.ID])
				}
			}
		})
	}

	for _, c := range []struct {
		query     string
		wantLimit int
		wantLen   int
	}{{"?limit=1000", 100, 23}, {"?limit=0", 20, 20}, {"?limit=-5", 20, 20}, {"", 20, 20}, {"?limit=3", 3, 3}} {
		t.Run("limit "+c.query, func(t *testing.T) {
			p, r := list(t, g, beta, c.query)
			if r.Status != 200 || p.Limit != c.wantLimit || len(p.Data) != c.wantLen {
				t.Errorf("%s: status %d limit %d len %d, want limit %d len %d", c.query, r.Status, p.Limit, len(p.Data), c.wantLimit, c.wantLen)
			}
		})
	}

	first, _ := list(t, g, beta, "?limit=5")
	if !first.HasMore || first.NextCursor == "" {
		t.Fatalf("first page has no cursor: %+v", first)
	}
	tampered := []byte(first.NextCursor)
	tampered[len(tampered)/2] ^= 1
	if tampered[len(tampered)/2] == '/' || tampered[len(tampered)/2] == '+' {
		tampered[len(tampered)/2] = 'A'
	}
	for name, cur := range map[string]string{
		"tampered":              string(tampered),
		"garbage":               "not a cursor!",
		"empty":                 "",
		"other entitlement set": first.NextCursor, // used with the plain token below
		"too long":              strings.Repeat("A", 513),
	} {
		t.Run("cursor "+name, func(t *testing.T) {
			tok := beta
			if name == "other entitlement set" {
				tok = plain
			}
			_, r := list(t, g, tok, "?cursor="+url.QueryEscape(cur))
			wantBucket(t, name, r, 400, "invalid_input")
		})
	}

	t.Run("cursor from before a catalog change", func(t *testing.T) {
		before, _ := list(t, g, beta, "?limit=5")
		changed := append(catalog23(peer.URL), model{ID: "prov9/new-model", Adapter: "http", Upstream: peer.URL, Price: 2})
		g.reload(t, changed)
		_, r := list(t, g, beta, "?limit=5&cursor="+url.QueryEscape(before.NextCursor))
		wantBucket(t, "stale cursor", r, 400, "invalid_input")
		ids := walk(t, g, beta, 7)
		if len(ids) != 24 {
			t.Errorf("after the change a walk visits %d models, want 24", len(ids))
		}
	})
}

func TestDetailAndSchema(t *testing.T) {
	peer := partner.NewSyncJSON(t)
	g := startRouter(t, embeddedBackend(), catalog23(peer.URL), "")
	beta := token(t, claims{ws: "ws-schema", entitlements: []string{"beta"}})
	plain := token(t, claims{ws: "ws-schema"})
	id := "prov0/model-00" // beta, with schema

	d := call(t, "GET", g.URL+"/v1/models/"+id, beta, nil, nil)
	m := d.json(t)
	if d.Status != 200 || m["id"] != id || m["provider"] != "prov0" || m["model"] != "model-00" ||
		m["input_schema_url"] != "https://router.test/v1/models/"+id+"/openapi.json" {
		t.Errorf("detail: %d %s", d.Status, d.Body)
	}
	nos := call(t, "GET", g.URL+"/v1/models/prov1/model-01", beta, nil, nil).json(t)
	if _, has := nos["input_schema_url"]; has {
		t.Errorf("model without schema has input_schema_url: %v", nos)
	}
	wantBucket(t, "detail not entitled", call(t, "GET", g.URL+"/v1/models/"+id, plain, nil, nil), 403, "forbidden")
	nf := call(t, "GET", g.URL+"/v1/models/prov1/model-1", plain, nil, nil)
	wantBucket(t, "detail unknown", nf, 404, "model_not_found")
	if strings.Contains(string(nf.Body), "model-00") || strings.Contains(string(nf.Body), "model-03") {
		t.Errorf("suggestions leak models outside the entitlements: %s", nf.Body)
	}
	if strings.Count(string(nf.Body), "prov") > 3 {
		t.Errorf("more than three suggestions: %s", nf.Body)
	}

	s := call(t, "GET", g.URL+"/v1/models/"+id+"/openapi.json", beta, nil, nil)
	etag := s.Header.Get("ETag")
	if s.Status != 200 || !strings.Contains(string(s.Body), `"openapi"`) || !strings.HasPrefix(etag, `"`) ||
		s.Header.Get("Cache-Control") != "private, must-revalidate" {
		t.Fatalf("schema: %d etag %q cc %q", s.Status, etag, s.Header.Get("Cache-Control"))
	}
	for _, c := range []struct {
		inm  string
		want int
	}{{etag, 304}, {"W/" + etag, 304}, {"*", 304}, {`"other", ` + etag, 304}, {`"other"`, 200}} {
		r := call(t, "GET", g.URL+"/v1/models/"+id+"/openapi.json", beta, nil, map[string]string{"If-None-Match": c.inm})
		if r.Status != c.want {
			t.Errorf("If-None-Match %s: %d, want %d", c.inm, r.Status, c.want)
		}
		if r.Header.Get("ETag") != etag || r.Header.Get("Cache-Control") != "private, must-revalidate" {
			t.Errorf("If-None-Match %s: headers ETag %q Cache-Control %q", c.inm, r.Header.Get("ETag"), r.Header.Get("Cache-Control"))
		}
		if c.want == 304 && len(r.Body) != 0 {
			t.Errorf("304 with a body: %q", r.Body)
		}
	}
	wantBucket(t, "schema unknown model", call(t, "GET", g.URL+"/v1/models/nope/none/openapi.json", beta, nil, nil), 404, "model_not_found")
	wantBucket(t, "schema not entitled", call(t, "GET", g.URL+"/v1/models/"+id+"/openapi.json", plain, nil, nil), 403, "forbidden")
}
