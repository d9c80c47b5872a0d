package catalog

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func resolveEnv(s string) string {
	return strings.NewReplacer("{env.FAL_KEY}", "fal-secret", "{env.BFL_KEY}", "bfl-secret",
		"{env.OPENAI_KEY}", "oa-secret", "{env.ELEVENLABS_KEY}", "el-secret").Replace(s)
}

func TestLoadFileExample(t *testing.T) {
	c, err := LoadFile("testdata/catalog.json", resolveEnv, Options{})
	if err != nil {
		t.Fatalf("LoadFile: %v", err)
	}
	if c.Len() != 4 {
		t.Fatalf("Len = %d, want 4", c.Len())
	}
	fluxFile, err := os.ReadFile("testdata/schemas/flux-dev.json")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		id                    string
		adapter               Adapter
		credValue, credHeader string
		charges, entitlement  string
		price                 int64
		deadline, poll        time.Duration
		provider, name        string
		hasSchema             bool
	}{
		{"fal/flux-dev", AdapterFal, "Key fal-secret", "Authorization", "yes", "", 3, 5 * time.Minute, 2 * time.Second, "fal", "flux-dev", true},
		{"bfl/flux-pro-1.1", AdapterBFL, "bfl-secret", "x-key", "no", "beta", 4, 10 * time.Minute, 500 * time.Millisecond, "bfl", "flux-pro-1.1", true},
		{"openai/gpt-image-1-high", AdapterHTTP, "Bearer oa-secret", "Authorization", "unknown", "", 17, 2 * time.Minute, DefaultPollInterval, "openai", "gpt-image-1-high", true},
		{"elevenlabs/tts-v3", AdapterHTTP, "el-secret", "xi-api-key", "unknown", "", 1, DefaultDeadline, DefaultPollInterval, "elevenlabs", "tts-v3", false},
	}
	for _, tc := range tests {
		t.Run(tc.id, func(t *testing.T) {
			m, ok := c.Lookup(tc.id)
			if !ok {
				t.Fatal("not found")
			}
			got := []any{m.Adapter, m.CredentialValue(), m.CredentialHeader, m.Billing.ChargesOnPolicyRejection,
				m.Entitlement, m.PriceCents, m.Deadline, m.PollInterval, m.Provider, m.Name, m.SchemaBytes != nil, m.Validator != nil}
			want := []any{tc.adapter, tc.credValue, tc.credHeader, tc.charges, tc.entitlement, tc.price, tc.deadline,
				tc.poll, tc.provider, tc.name, tc.hasSchema, tc.hasSchema}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("field %d: got %v want %v", i, got[i], want[i])
				}
			}
			if m.Provider+"/"+m.Name != m.ID {
				t.Errorf("provider/name %q/%q does not rebuild id", m.Provider, m.Name)
			}
			if tc.hasSchema && (len(m.ETag) != 66 || m.ETag[0] != '"' || m.ETag[65] != '"') {
				t.Errorf("ETag %q is not a quoted sha256 hex", m.ETag)
			}
		})
	}
	m, _ := c.Lookup("fal/flux-dev")
	if !bytes.Equal(m.SchemaBytes, fluxFile) {
		t.Error("schema file bytes are not served byte-for-byte")
	}
	inline, _ := c.Lookup("openai/gpt-image-1-high")
	if bytes.ContainsAny(inline.SchemaBytes, "\n") {
		t.Error("inline schema should be compacted")
	}
	if d := inline.Validator.Validate(map[string]any{"prompt": "x", "size": "2x2"}); len(d) != 1 || d[0].Type != "enum" {
		t.Errorf("inline schema validator: %+v", d)
	}
	e := inline.Entry()
	if e.ID != inline.ID || e.Provider != "openai" || e.Model != "gpt-image-1-high" || e.Billing.ChargesOnPolicyRejection != "unknown" {
		t.Errorf("Entry = %+v", e)
	}
}

func TestLoadRejects(t *testing.T) {
	entry := func(fields string) string {
		return `{"models":[{"adapter":"http","upstream":"https://p.example/x",` + fields + `}]}`
	}
	tests := []struct {
		name, doc, want string
	}{
		{"uppercase", entry(`"id":"Fal/flux"`), `"Fal/flux": provider segment "Fal" must match`},
		{"trailing dash", entry(`"id":"fal/flux-"`), `model segment "flux-" must match`},
		{"double separator", entry(`"id":"fal/flux--dev"`), "must match"},
		{"one segment", entry(`"id":"fal"`), "provider/model"},
		{"four segments", entry(`"id":"a/b/c/d"`), "provider/model"},
		{"empty id", entry(`"id":""`), "entry #0: id is required"},
		{"provider too long", entry(`"id":"` + strings.Repeat("p", 65) + `/m"`), "over 64"},
		{"model too long", entry(`"id":"p/` + strings.Repeat("m", 129) + `"`), "over 128"},
		{"id too long", entry(`"id":"` + strings.Repeat("p", 64) + "/" + strings.Repeat("m", 100) + "/" + strings.Repeat("v", 40) + `"`), "over the limit of 193"},
		{"reserved variant", entry(`"id":"p/m/openapi.json"`), "reserved"},
		{"variant", entry(`"id":"acme/image/hd"`), `"acme/image/hd": id must be provider/model: a listed model's id has no variant segment`},
		{"duplicate", `{"models":[{"id":"a/b","adapter":"http","upstream":"https://x.example"},{"id":"a/b","adapter":"fal","upstream":"https://y.example"}]}`, `"a/b": duplicate id`},
		{"no adapter", `{"models":[{"id":"a/b","upstream":"https://x.example"}]}`, "adapter is required"},
		{"bad adapter", `{"models":[{"id":"a/b","adapter":"grpc","upstream":"https://x.example"}]}`, `adapter "grpc"`},
		{"http upstream", `{"models":[{"id":"a/b","adapter":"http","upstream":"http://x.example"}]}`, "must use https"},
		{"relative upstream", `{"models":[{"id":"a/b","adapter":"http","upstream":"/x"}]}`, "absolute http(s) URL"},
		{"negative price", entry(`"id":"a/b","price_cents":-1`), "price_cents must be >= 0"},
		{"bad deadline", entry(`"id":"a/b","deadline":"soon"`), "deadline"},
		{"zero deadline", entry(`"id":"a/b","deadline":"0s"`), "deadline must be positive"},
		{"negative poll", entry(`"id":"a/b","poll_interval":"-1s"`), "poll_interval must be positive"},
		{"unknown field", entry(`"id":"a/b","pricecents":1`), "unknown field"},
		{"missing schema file", entry(`"id":"a/b","input_schema":"nope.json"`), `"a/b": input_schema`},
		{"schema not compiling", entry(`"id":"a/b","input_schema":{"paths":{}}`), "no request schema"},
		{"schema number", entry(`"id":"a/b","input_schema":5`), "file path or an inline"},
		{"header without name", entry(`"id":"a/b","credential_header":{"prefix":"Bearer"}`), "credential_header.name"},
		{"not json", `{"models":[`, "parse catalog"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc), nil, Options{Dir: t.TempDir()})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want error containing %q, got %v", tc.want, err)
			}
		})
	}
}

func TestCredentialResolvingToEmpty(t *testing.T) {
	doc := `{"models":[{"id":"a/b","adapter":"http","upstream":"https://x.example","credential":"{env.UNSET}"}]}`
	_, err := Load([]byte(doc), func(string) string { return "" }, Options{})
	if err == nil || !strings.Contains(err.Error(), `"a/b": credential resolved to an empty value`) {
		t.Fatalf("got %v", err)
	}
	c, err := Load([]byte(doc), nil, Options{}) // no resolver: kept verbatim
	if err != nil {
		t.Fatal(err)
	}
	if m, _ := c.Lookup("a/b"); m.Credential != "{env.UNSET}" {
		t.Fatalf("credential %q", m.Credential)
	}
}

func TestLoadAcceptsEdgeIDs(t *testing.T) {
	ids := []string{
		strings.Repeat("p", 64) + "/" + strings.Repeat("m", 128), // exactly 193
		"a.b_c-d/0.9", "p/openapi.json",
	}
	for _, id := range ids {
		doc := `{"models":[{"id":"` + id + `","adapter":"http","upstream":"http://127.0.0.1:9/x"}]}`
		if _, err := Load([]byte(doc), nil, Options{AllowHTTPUpstream: true}); err != nil {
			t.Errorf("%s: %v", id, err)
		}
	}
}

func TestVersion(t *testing.T) {
	base := func() []Model {
		return []Model{
			{ID: "a/one", Adapter: AdapterHTTP, Upstream: "https://a.example", PriceCents: 1, Credential: "s1"},
			{ID: "b/two", Adapter: AdapterFal, Upstream: "https://b.example", Entitlement: "beta"},
		}
	}
	mk := func(t *testing.T, ms []Model, key string) *Catalog {
		t.Helper()
		c, err := New(ms, Options{CursorKey: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ref := mk(t, base(), "k1").Version()
	reordered := base()
	reordered[0], reordered[1] = reordered[1], reordered[0]
	tests := []struct {
		name   string
		models []Model
		same   bool
	}{
		{"same content, other key", base(), true},
		{"order does not matter", reordered, true},
		{"credential rotation is not a new catalog", func() []Model { m := base(); m[0].Credential = "s2"; return m }(), true},
		{"price", func() []Model { m := base(); m[0].PriceCents = 2; return m }(), false},
		{"entitlement", func() []Model { m := base(); m[1].Entitlement = ""; return m }(), false},
		{"schema", func() []Model {
			m := base()
			m[0].SchemaBytes = []byte(`{"components":{"schemas":{"Input":{"type":"object"}}}}`)
			return m
		}(), false},
		{"removed", base()[:1], false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := mk(t, tc.models, "k2").Version()
			if (got == ref) != tc.same {
				t.Fatalf("version %s vs %s, want same=%v", got, ref, tc.same)
			}
		})
	}
}
