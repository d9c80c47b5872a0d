package comfyauth_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/comfygate/comfygate"
)

// TestRequireBefore adapts Caddyfiles (and JSON as written by hand) and
// provisions them as `validate`, `run` and `reload` do: a handler that
// reads the principal with no comfy_auth before it on any way a request
// can take is refused with the error a request would otherwise get; every
// order that works loads.
func TestRequireBefore(t *testing.T) {
	catalog, err := filepath.Abs("../../caddyfile-examples/router-catalog.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"FAL_KEY", "BFL_KEY", "OPENAI_KEY", "ELEVENLABS_KEY"} {
		t.Setenv(k, "example-"+k)
	}
	t.Chdir(t.TempDir()) // storage embedded ./data
	router := "model_router {\n\t\t\tcatalog " + catalog + "\n\t\t}"
	cases := []struct {
		name  string
		sites string // Caddyfile sites, or a JSON config
		err   string // "" when it loads; else a part of the error
	}{
		{"documented order", `http://:18189 {
	route {
		error_envelope
		comfy_auth none
		idempotency
		comfy_assets
		comfy_jobs
		comfy_native
		error "not found" 404
	}
}`, ""},
		{"comfy_jobs without auth", site("error_envelope", "comfy_jobs"),
			"comfy_jobs: no principal; put comfy_auth before comfy_jobs (server srv0 routes[0].handle[0].routes[0].handle[1])"},
		{"comfy_assets without auth", site("comfy_assets"), "comfy_assets: no principal; put comfy_auth before comfy_assets"},
		{"comfy_native without auth", site("comfy_native"), "comfy_native: no principal; put comfy_auth before comfy_native"},
		{"idempotency without auth", site("idempotency", "comfy_jobs"), "idempotency: no principal; put comfy_auth before idempotency"},
		{"model_router without auth", site(router), "model_router: no principal; put comfy_auth before model_router"},
		{"model_router after auth", site("comfy_auth none", router), ""},
		{"auth after", site("comfy_jobs", "comfy_auth none"), "put comfy_auth before comfy_jobs"},
		{"site directives, sorted", `http://:18189 {
	comfy_jobs
	comfy_auth none
}`, ""},
		{"auth in another branch", `http://:18189 {
	handle /a/* {
		comfy_auth none
		comfy_assets
	}
	handle {
		comfy_jobs
	}
}`, "put comfy_auth before comfy_jobs"},
		{"auth in another site", `http://:18189 {
	route {
		comfy_auth none
		comfy_assets
	}
}
http://:18190 {
	route {
		comfy_jobs
	}
}`, "put comfy_auth before comfy_jobs (server srv1"},
		{"auth in another host of one server", `http://a.example:18189 {
	route {
		comfy_auth none
		comfy_assets
	}
}
http://b.example:18189 {
	route {
		comfy_jobs
	}
}`, "put comfy_auth before comfy_jobs"},
		{"auth nested in a subroute before", site("route {\n\t\t\troute {\n\t\t\t\tcomfy_auth none\n\t\t\t}\n\t\t}", "comfy_jobs"), ""},
		{"auth before a handle block", `http://:18189 {
	comfy_auth none
	handle /api/v2/* {
		comfy_assets
	}
	handle_path /inner/* {
		route {
			idempotency
			comfy_jobs
		}
	}
}`, ""},
		// A handle block is not terminal: /x/* requests reach comfy_jobs
		// with a principal, as with a matcher on comfy_auth.
		{"auth in a handle_path block before", `http://:18189 {
	route {
		handle_path /x/* {
			comfy_auth none
		}
		comfy_jobs
	}
}`, ""},
		{"auth in a handle_path block after", `http://:18189 {
	route {
		comfy_jobs
		handle_path /x/* {
			comfy_auth none
		}
	}
}`, "put comfy_auth before comfy_jobs"},
		{"auth behind a matcher", site("comfy_auth /api/* none", "comfy_jobs"), ""},
		{"auth in an invoked named route", `&(auth) {
	comfy_auth none
}
http://:18189 {
	route {
		invoke auth
		comfy_jobs
	}
}`, ""},
		// Here the site is provisioned (its invoke loaded) before the
		// named route's handlers ask.
		{"auth and jobs in a named route", `&(api) {
	comfy_auth none
	comfy_jobs
}
http://:18189 {
	invoke api
}`, ""},
		{"jobs in a named route, no auth", `&(api) {
	comfy_jobs
}
http://:18189 {
	invoke api
}`, "put comfy_auth before comfy_jobs"},
		{"handle_errors without auth", `http://:18189 {
	route {
		comfy_auth none
		comfy_assets
	}
	handle_errors {
		route {
			comfy_jobs
		}
	}
}`, "put comfy_auth before comfy_jobs (server srv0 errors routes"},
		{"deployment, then auth", site("comfy_deployment", "comfy_auth api_keys", "idempotency", "comfy_assets", "comfy_jobs"), ""},
		{"auth, then deployment", site("comfy_auth api_keys", "comfy_deployment", "comfy_jobs"),
			"comfy_jobs: deployment not admitted; put comfy_auth after comfy_deployment"},
		{"JSON, auth after, one route", `{"admin": {"disabled": true},
 "apps": {"comfygate": {"storage": {"backend": "embedded", "dir": "./data"}},
  "http": {"servers": {"api": {"listen": [":18189"], "routes": [
   {"handle": [{"handler": "comfy_jobs"}, {"handler": "comfy_auth"}]}]}}}}}`,
			"comfy_jobs: no principal; put comfy_auth before comfy_jobs (server api routes[0].handle[0])"},
		// Here the first route is provisioned before comfy_jobs asks.
		{"JSON, auth in a subroute before", `{"admin": {"disabled": true},
 "apps": {"comfygate": {"storage": {"backend": "embedded", "dir": "./data"}},
  "http": {"servers": {"api": {"listen": [":18189"], "routes": [
   {"handle": [{"handler": "subroute", "routes": [{"handle": [{"handler": "comfy_auth"}]}]}]},
   {"match": [{"path": ["/api/v2/*"]}], "handle": [{"handler": "comfy_jobs"}]}]}}}}}`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := load(t, c.sites)
			switch {
			case c.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.err != "" && err == nil:
				t.Errorf("loaded; want an error with %q", c.err)
			case c.err != "" && !strings.Contains(err.Error(), c.err):
				t.Errorf("error %q; want it to contain %q", err, c.err)
			}
		})
	}
}

// site is one site whose route block holds the directives in order.
func site(directives ...string) string {
	return "http://:18189 {\n\troute {\n\t\t" + strings.Join(directives, "\n\t\t") + "\n\t}\n}"
}

// load adapts sites (a Caddyfile after the global options, or a JSON
// config) and provisions the config as `validate` does.
func load(t *testing.T, sites string) error {
	t.Helper()
	raw := []byte(sites)
	if !strings.HasPrefix(sites, "{") {
		caddyfile := "{\n\tadmin off\n\tcomfygate {\n\t\tstorage embedded ./data\n\t}\n}\n" + sites + "\n"
		out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), map[string]any{"filename": "Caddyfile"})
		if err != nil {
			t.Fatalf("adapt: %v\n%s", err, caddyfile)
		}
		raw = out
	}
	var cfg caddy.Config
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	return caddy.Validate(&cfg)
}
