// Package handlerorder checks, when a configuration loads, that the
// handlers which read what comfy_auth puts in a request come after it: the
// principal (comfy_jobs, comfy_assets, comfy_native, model_router,
// idempotency), and the admission of the deployment comfy_deployment
// resolved (comfy_jobs, comfy_assets). Without the check such a config
// loads and answers every request 500.
//
// It works on a model of an HTTP server's routes, as Caddy runs them: a
// route list is tried in order; a route runs its handlers in order, each
// passing the request on to the next and the last to the route after it;
// a terminal route ends the request; of the routes of one group only the
// first that matches runs; a subroute (Caddyfile route, handle, handle_path)
// runs its own route list in the middle of its route and then goes on
// with the route's next handler. Matchers cannot be read ahead of a
// request, so a route with matchers may or may not match: a handler is
// accepted when comfy_auth precedes it on at least one way a request can
// take, so that a config that can work is never refused (a comfy_auth
// behind a matcher counts). It knows nothing of Caddy; comfyauth builds the model.
package handlerorder

import (
	"fmt"
	"slices"
	"strings"
)

// Route is one route of a list.
type Route struct {
	// Group names the route's group ("" for none): once a route of a
	// group matched, the group's later routes are skipped.
	Group string
	// Conditional routes have matchers: a request may skip them. A route
	// without matchers runs for every request that reaches it.
	Conditional bool
	// Terminal routes end the request after their handlers.
	Terminal bool
	// Handlers run in order.
	Handlers []Handler
}

// Handler is one handler of a route, by module name (comfy_auth, not
// http.handlers.comfy_auth).
type Handler struct {
	Name string
	// Routes is what a handler that runs a route list (subroute, or
	// invoke with its named route) runs before passing the request on.
	Routes []Route
	// Errors is the route list a subroute runs when its routes fail,
	// with the request as it entered the subroute.
	Errors []Route
}

// Module names the check knows.
const (
	Auth       = "comfy_auth"
	Deployment = "comfy_deployment"
)

// readers are the handlers that need a principal; those mapped to true
// also need comfy_auth to have admitted a deployment scope that
// comfy_deployment put before them.
var readers = map[string]bool{
	"comfy_jobs":   true,
	"comfy_assets": true,
	"comfy_native": false,
	"model_router": false,
	"idempotency":  false,
}

// Check walks routes from a request that nothing has authenticated and
// returns an error for the first handler named handler that no comfy_auth
// precedes on any way through them — "comfy_jobs: no principal; put
// comfy_auth before comfy_jobs", the same words a request would get — or
// that follows a comfy_deployment with no comfy_auth after it. where
// prefixes the location in the error (a server's name, say).
func Check(routes []Route, handler, where string) error {
	w := walker{handler: handler, scope: readers[handler]}
	w.list(routes, []state{{}}, where+" routes")
	return w.err
}

// auth is what the handlers so far put in the request.
type auth uint8

const (
	anonymous  auth = iota // no comfy_auth yet
	admitted               // comfy_auth ran, after every comfy_deployment
	unadmitted             // comfy_auth ran, then comfy_deployment: its scope has no admission
)

// state is where one way through the routes stands: its auth and the
// route groups it has satisfied (sorted, joined by spaces), comparable so
// that equal ways merge.
type state struct {
	auth   auth
	groups string
}

func (s state) satisfied(group string) bool {
	return slices.Contains(strings.Fields(s.groups), group)
}

func (s state) satisfy(group string) state {
	gs := append(strings.Fields(s.groups), group)
	slices.Sort(gs)
	s.groups = strings.Join(gs, " ")
	return s
}

type walker struct {
	handler string
	scope   bool
	err     error
}

// list runs routes from the states in and returns the states of the ways
// that reach the end of the list (every way a terminal route does not end).
func (w *walker) list(routes []Route, in []state, at string) []state {
	cur := in
	for i, r := range routes {
		var next, enter []state
		for _, s := range cur {
			switch {
			case r.Group != "" && s.satisfied(r.Group):
				next = add(next, s) // skipped: a route of its group ran
				continue
			case r.Conditional:
				next = add(next, s) // the route does not match
			}
			if r.Group != "" {
				s = s.satisfy(r.Group)
			}
			enter = add(enter, s)
		}
		if len(enter) > 0 {
			out := w.handlers(r.Handlers, enter, fmt.Sprintf("%s[%d]", at, i))
			if !r.Terminal {
				next = add(next, out...)
			}
		}
		cur = next
	}
	return cur
}

// handlers runs one route's handlers in order.
func (w *walker) handlers(hs []Handler, in []state, at string) []state {
	cur := in
	for j, h := range hs {
		hat := fmt.Sprintf("%s.handle[%d]", at, j)
		switch {
		case h.Name == Auth:
			cur = mapAuth(cur, func(auth) auth { return admitted })
		case h.Name == Deployment:
			cur = mapAuth(cur, func(a auth) auth {
				if a == admitted {
					return unadmitted
				}
				return a
			})
		case h.Name == w.handler:
			w.check(cur, hat)
		}
		if len(h.Routes) > 0 || len(h.Errors) > 0 {
			out := w.list(h.Routes, cur, hat+".routes")
			if len(h.Errors) > 0 {
				out = add(out, w.list(h.Errors, cur, hat+".errors.routes")...)
			}
			cur = out
		}
	}
	return cur
}

// check records an error unless one of the ways reaching the handler
// gives it what it reads.
func (w *walker) check(ways []state, at string) {
	if w.err != nil {
		return
	}
	var principal, admission bool
	for _, s := range ways {
		principal = principal || s.auth != anonymous
		admission = admission || s.auth == admitted
	}
	switch {
	case !principal:
		w.err = fmt.Errorf("%s: no principal; put comfy_auth before %s (%s)", w.handler, w.handler, at)
	case w.scope && !admission:
		w.err = fmt.Errorf("%s: deployment not admitted; put comfy_auth after comfy_deployment (%s)", w.handler, at)
	}
}

func mapAuth(ss []state, f func(auth) auth) []state {
	var out []state
	for _, s := range ss {
		s.auth = f(s.auth)
		out = add(out, s)
	}
	return out
}

// add appends the states not already in ss.
func add(ss []state, more ...state) []state {
	for _, s := range more {
		if !slices.Contains(ss, s) {
			ss = append(ss, s)
		}
	}
	return ss
}
