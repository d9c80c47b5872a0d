package handlerorder

import (
	"strings"
	"testing"
)

// h is a handler by name; sub a subroute running routes.
func h(name string) Handler { return Handler{Name: name} }

func sub(routes ...Route) Handler { return Handler{Name: "subroute", Routes: routes} }

// r is an unconditional route running handlers.
func r(hs ...Handler) Route { return Route{Handlers: hs} }

// v2 is the documented chain after auth.
func v2() []Handler { return []Handler{h("idempotency"), h("comfy_assets"), h("comfy_jobs")} }

func TestCheck(t *testing.T) {
	site := func(hs ...Handler) []Route {
		return []Route{{Terminal: true, Handlers: []Handler{sub(splitRoutes(hs)...)}}}
	}
	cases := []struct {
		name    string
		routes  []Route
		handler string
		err     string // "" when the config is accepted; else a part of the error
	}{
		{"documented order", site(append([]Handler{h("error_envelope"), h("comfy_auth")}, v2()...)...), "comfy_jobs", ""},
		{"documented order, idempotency", site(append([]Handler{h("comfy_auth")}, v2()...)...), "idempotency", ""},
		{"no auth", site(append([]Handler{h("error_envelope")}, v2()...)...), "comfy_jobs",
			"comfy_jobs: no principal; put comfy_auth before comfy_jobs (srv0 routes[0].handle[0].routes[3].handle[0])"},
		{"no auth, assets", site(v2()...), "comfy_assets", "comfy_assets: no principal; put comfy_auth before comfy_assets"},
		{"no auth, idempotency", site(v2()...), "idempotency", "idempotency: no principal; put comfy_auth before idempotency"},
		{"no auth, native", site(h("comfy_native")), "comfy_native", "comfy_native: no principal; put comfy_auth before comfy_native"},
		{"no auth, router", site(h("model_router")), "model_router", "model_router: no principal; put comfy_auth before model_router"},
		{"auth after", site(h("comfy_jobs"), h("comfy_auth")), "comfy_jobs", "put comfy_auth before comfy_jobs"},
		{"auth after, one route", []Route{r(h("comfy_jobs"), h("comfy_auth"))}, "comfy_jobs", "(srv0 routes[0].handle[0])"},
		{"auth before, one route", []Route{r(h("comfy_auth"), h("comfy_jobs"))}, "comfy_jobs", ""},
		{"handler absent", site(h("comfy_assets")), "comfy_jobs", ""},
		{"auth in a subroute before", site(sub(r(sub(r(h("comfy_auth"))))), h("comfy_jobs")), "comfy_jobs", ""},
		{"auth and the handler nested deeper", site(h("comfy_auth"), sub(r(sub(r(h("comfy_jobs")))))), "comfy_jobs", ""},
		{"auth in another branch", []Route{
			{Group: "g", Conditional: true, Handlers: []Handler{sub(r(h("comfy_auth"), h("comfy_assets")))}},
			{Group: "g", Handlers: []Handler{sub(r(h("comfy_jobs")))}},
		}, "comfy_jobs", "put comfy_auth before comfy_jobs (srv0 routes[1].handle[0].routes[0].handle[0])"},
		{"auth in another branch, a route between", []Route{
			{Group: "g", Conditional: true, Handlers: []Handler{sub(r(h("comfy_auth")))}},
			{Conditional: true, Handlers: []Handler{h("header")}},
			{Group: "g", Handlers: []Handler{h("comfy_jobs")}},
		}, "comfy_jobs", "put comfy_auth before comfy_jobs"},
		{"auth in another group before", []Route{
			{Group: "g1", Conditional: true, Handlers: []Handler{sub(r(h("comfy_auth")))}},
			{Group: "g2", Handlers: []Handler{h("comfy_jobs")}},
		}, "comfy_jobs", ""},
		{"auth in another site", []Route{
			{Conditional: true, Terminal: true, Handlers: []Handler{sub(r(h("comfy_auth"), h("comfy_assets")))}},
			{Conditional: true, Terminal: true, Handlers: []Handler{sub(r(h("comfy_jobs")))}},
		}, "comfy_jobs", "put comfy_auth before comfy_jobs"},
		{"auth in a terminal route before", []Route{
			{Terminal: true, Conditional: true, Handlers: []Handler{h("comfy_auth")}},
			r(h("comfy_jobs")),
		}, "comfy_jobs", "put comfy_auth before comfy_jobs"},
		{"auth in a terminal route of a subroute before", site(sub(Route{Terminal: true, Conditional: true, Handlers: []Handler{h("comfy_auth")}}), h("comfy_jobs")),
			"comfy_jobs", "put comfy_auth before comfy_jobs"},
		{"auth behind a matcher", []Route{{Conditional: true, Handlers: []Handler{h("comfy_auth")}}, r(h("comfy_jobs"))}, "comfy_jobs", ""},
		{"deployment, then auth", site(append([]Handler{h("comfy_deployment"), h("comfy_auth")}, v2()...)...), "comfy_jobs", ""},
		{"auth, then deployment", site(append([]Handler{h("comfy_auth"), h("comfy_deployment")}, v2()...)...), "comfy_assets",
			"comfy_assets: deployment not admitted; put comfy_auth after comfy_deployment"},
		{"auth, then deployment, idempotency", site(append([]Handler{h("comfy_auth"), h("comfy_deployment")}, v2()...)...), "idempotency", ""},
		{"auth, then deployment behind a matcher", []Route{
			r(h("comfy_auth")), {Conditional: true, Handlers: []Handler{h("comfy_deployment")}}, r(h("comfy_jobs")),
		}, "comfy_jobs", ""},
		{"auth, then deployment in every route", []Route{
			r(h("comfy_auth")), r(h("comfy_deployment")), r(h("comfy_jobs")),
		}, "comfy_jobs", "deployment not admitted"},
		{"deployment, no auth", site(h("comfy_deployment"), h("comfy_jobs")), "comfy_jobs", "no principal"},
		{"one good, one bad", []Route{
			{Conditional: true, Terminal: true, Handlers: []Handler{sub(r(h("comfy_auth"), h("comfy_jobs")))}},
			{Conditional: true, Terminal: true, Handlers: []Handler{sub(r(h("comfy_jobs")))}},
		}, "comfy_jobs", "(srv0 routes[1].handle[0].routes[0].handle[0])"},
		{"subroute error routes, no auth", []Route{r(Handler{Name: "subroute",
			Routes: []Route{r(h("comfy_auth"), h("comfy_assets"))},
			Errors: []Route{r(h("comfy_jobs"))}})}, "comfy_jobs", "(srv0 routes[0].handle[0].errors.routes[0].handle[0])"},
		{"subroute error routes after auth", []Route{r(h("comfy_auth"), Handler{Name: "subroute",
			Errors: []Route{r(h("comfy_jobs"))}})}, "comfy_jobs", ""},
		{"auth in an invoked named route", []Route{r(Handler{Name: "invoke", Routes: []Route{r(h("comfy_auth"))}}, h("comfy_jobs"))}, "comfy_jobs", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Check(c.routes, c.handler, "srv0")
			switch {
			case c.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.err != "" && err == nil:
				t.Errorf("accepted; want %q", c.err)
			case c.err != "" && !strings.Contains(err.Error(), c.err):
				t.Errorf("error %q; want it to contain %q", err, c.err)
			}
		})
	}
}

// splitRoutes puts each handler in a route of its own, as the Caddyfile
// does with the directives of a route block.
func splitRoutes(hs []Handler) []Route {
	var out []Route
	for _, x := range hs {
		out = append(out, r(x))
	}
	return out
}
