package modelrouter

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/router/rehost"
)

func TestEtagMatches(t *testing.T) {
	const etag = `"abc"`
	for _, c := range []struct {
		values []string
		want   bool
	}{
		{nil, false}, {[]string{`"abc"`}, true}, {[]string{`W/"abc"`}, true}, {[]string{"*"}, true},
		{[]string{`"x", "abc"`}, true}, {[]string{`"x"`, `"abc"`}, true}, {[]string{`"abcd"`}, false}, {[]string{`abc`}, false},
	} {
		if got := etagMatches(c.values, etag); got != c.want {
			t.Errorf("etagMatches(%q) = %v, want %v", c.values, got, c.want)
		}
	}
}

func TestCutRoutePrefix(t *testing.T) {
	for _, c := range []struct {
		path, prefix, rest string
		ok                 bool
	}{
		{"/v1/models", "/v1/models", "", true},
		{"/v1/models/", "/v1/models", "/", true},
		{"/v2/models/acme/image/openapi.json", "/v2/models", "/acme/image/openapi.json", true},
		{"/v1/modelsx", "", "", false},
		{"/v3/models", "", "", false},
		{"/api/v2/models", "", "", false},
	} {
		prefix, rest, ok := cutRoutePrefix(c.path)
		if prefix != c.prefix || rest != c.rest || ok != c.ok {
			t.Errorf("cutRoutePrefix(%q) = %q, %q, %v; want %q, %q, %v", c.path, prefix, rest, ok, c.prefix, c.rest, c.ok)
		}
	}
}

func TestValidKey(t *testing.T) {
	for _, c := range []struct {
		key  string
		want bool
	}{{"", false}, {"a", true}, {strings.Repeat("k", 255), true}, {strings.Repeat("k", 256), false}, {"tab\there", false}, {"ünï", false}, {"a b-c_d.e:f", true}} {
		if got := validKey(c.key); got != c.want {
			t.Errorf("validKey(%q) = %v, want %v", c.key, got, c.want)
		}
	}
}

func TestUnmarshalCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser(`model_router /etc/catalog.json {
		public_base https://r.example.com
		max_in_flight 5
		spend_ceiling_cents 300
		rate minute 1m 60
		rate day 24h 1000
		require_credits
		lease_ttl 10s
		collect_window 5m
		takeover_after 3s
		max_body_size 2MiB
		redis_prefix x:
		allow_insecure_upstreams
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	if h.Catalog != "/etc/catalog.json" || h.PublicBase != "https://r.example.com" || h.MaxInFlight != 5 ||
		h.SpendCeilingCents != 300 || len(h.Rate) != 2 || h.Rate[1].Max != 1000 || time.Duration(h.Rate[1].Period) != 24*time.Hour ||
		!h.RequireCredits || time.Duration(h.LeaseTTL) != 10*time.Second || time.Duration(h.CollectWindow) != 5*time.Minute ||
		time.Duration(h.TakeoverAfter) != 3*time.Second ||
		h.MaxBodyBytes != 2<<20 || h.RedisPrefix != "x:" || !h.AllowInsecureUpstreams {
		t.Errorf("parsed %+v", h)
	}
	for _, bad := range []string{
		"model_router { bogus 1 }", "model_router { rate minute 1m }", "model_router { max_in_flight x }",
		"model_router a b", "model_router { lease_ttl soon }",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}

func TestUnmarshalCaddyfileRehost(t *testing.T) {
	d := caddyfile.NewTestDispenser(`model_router /etc/catalog.json {
		rehost bfl {
			urls result.sample
			lifetime 12h
		}
		rehost openai {
			urls data[*].url
			base64 data[*].b64_json images[*]
		}
		rehost_max_size 8MiB
		rehost_timeout 20s
		rehost_base https://api.example.com/api/v2
		rehost_allow_private
	}`)
	var h Handler
	if err := h.UnmarshalCaddyfile(d); err != nil {
		t.Fatal(err)
	}
	want := map[string]rehost.RuleSpec{
		"bfl":    {URLs: []string{"result.sample"}, Lifetime: "12h"},
		"openai": {URLs: []string{"data[*].url"}, Base64: []string{"data[*].b64_json", "images[*]"}},
	}
	if !reflect.DeepEqual(h.Rehost, want) || h.RehostMaxBytes != 8<<20 || time.Duration(h.RehostTimeout) != 20*time.Second ||
		h.RehostBase != "https://api.example.com/api/v2" || !h.RehostAllowPrivate {
		t.Errorf("parsed %+v", h)
	}
	for _, bad := range []string{
		"model_router { rehost }", "model_router { rehost bfl { } }", "model_router {\n rehost bfl {\n urls\n }\n }",
		"model_router { rehost bfl { urls a..b } }", "model_router { rehost bfl { urls a\n lifetime soon } }",
		"model_router { rehost bfl { url a } }", "model_router { rehost bfl { urls a }\n rehost bfl { urls b } }",
		"model_router { rehost_max_size lots }", "model_router { rehost_allow_private yes }",
	} {
		var h Handler
		if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(bad)); err == nil {
			t.Errorf("%q parsed without error", bad)
		}
	}
}
