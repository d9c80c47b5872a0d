package comfyauth

import (
	"context"
	"encoding/json"
	"slices"
	"sync"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/comfygate/comfygate/internal/handlerorder"
)

// RequireBefore refuses a configuration in which a handler named handler
// (comfy_jobs, comfy_assets, comfy_native, model_router, idempotency) has
// no comfy_auth before it, or follows a comfy_deployment that no comfy_auth
// follows: such a config would answer every request 500. Those handlers
// call it from Provision, so that `validate`, `run` and `reload` refuse the
// config with the error a request would get (see handlerorder).
//
// A handler's Provision cannot see its siblings, but the http app it is
// part of can be reached: it is the nearest *caddyhttp.App of the modules
// being provisioned, and its servers hold every route, those already
// provisioned (their handlers loaded) and those still to be (raw JSON),
// so the whole configuration is checked whatever the order of loading.
// Outside an http app (a handler provisioned on its own) there is nothing
// to check.
func RequireBefore(ctx caddy.Context, handler string) error {
	var app *caddyhttp.App
	mods := ctx.Modules()
	for i := len(mods) - 1; i >= 0 && app == nil; i-- {
		app, _ = mods[i].(*caddyhttp.App)
	}
	if app == nil {
		return nil
	}
	v, loaded := orderChecks.LoadOrStore(app, &orderCheck{results: map[string]error{}})
	if !loaded {
		// The config's context ends when it is unloaded, or refused.
		context.AfterFunc(ctx, func() { orderChecks.Delete(app) })
	}
	return v.(*orderCheck).result(app, handler)
}

// orderChecks holds, for each http app being provisioned, what its
// handlers asked: the model is the same whichever asks, and a config with
// many sites has many handlers.
var orderChecks sync.Map // *caddyhttp.App → *orderCheck

type orderCheck struct {
	mu      sync.Mutex
	servers []serverModel // built at the first question
	results map[string]error
}

// serverModel is one server's routes and error routes, modeled.
type serverModel struct {
	name           string
	routes, errors []handlerorder.Route
}

func (c *orderCheck) result(app *caddyhttp.App, handler string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err, ok := c.results[handler]; ok {
		return err
	}
	if c.servers == nil {
		c.servers = model(app)
	}
	var err error
	for _, s := range c.servers {
		if err = handlerorder.Check(s.routes, handler, "server "+s.name); err != nil {
			break
		}
		if err = handlerorder.Check(s.errors, handler, "server "+s.name+" errors"); err != nil {
			break
		}
	}
	c.results[handler] = err
	return err
}

// model models every server of app, in name order.
func model(app *caddyhttp.App) []serverModel {
	names := make([]string, 0, len(app.Servers))
	for name := range app.Servers {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]serverModel, 0, len(names))
	for _, name := range names {
		srv := app.Servers[name]
		m := modeler{srv: srv}
		s := serverModel{name: name, routes: m.routes(srv.Routes)}
		if srv.Errors != nil {
			s.errors = m.routes(srv.Errors.Routes)
		}
		out = append(out, s)
	}
	return out
}

// maxInvokeDepth bounds how deep invoke is followed into named routes
// (which may invoke each other in a cycle).
const maxInvokeDepth = 16

// modeler turns a server's routes into handlerorder's model.
type modeler struct {
	srv   *caddyhttp.Server
	depth int
}

func (m *modeler) routes(rs caddyhttp.RouteList) []handlerorder.Route {
	out := make([]handlerorder.Route, 0, len(rs))
	for i := range rs {
		out = append(out, m.route(&rs[i]))
	}
	return out
}

// route models a route either way it may be found: still raw (its
// handlers not loaded yet, or loading right now) or provisioned.
func (m *modeler) route(r *caddyhttp.Route) handlerorder.Route {
	out := handlerorder.Route{
		Group:       r.Group,
		Terminal:    r.Terminal,
		Conditional: len(r.MatcherSetsRaw) > 0 || len(r.MatcherSets) > 0,
	}
	if r.HandlersRaw != nil {
		for _, raw := range r.HandlersRaw {
			out.Handlers = append(out.Handlers, m.rawHandler(raw))
		}
		return out
	}
	for _, h := range r.Handlers {
		out.Handlers = append(out.Handlers, m.handler(h))
	}
	return out
}

func (m *modeler) handler(h caddyhttp.MiddlewareHandler) handlerorder.Handler {
	switch h := h.(type) {
	case *caddyhttp.Subroute:
		return m.subroute(h)
	case *caddyhttp.Invoke:
		return m.invoke(h.Name)
	case caddy.Module:
		return handlerorder.Handler{Name: h.CaddyModule().ID.Name()}
	}
	return handlerorder.Handler{}
}

// rawHandler models a handler from its JSON: {"handler": "<name>", …}.
// JSON that does not decode is modeled as a nameless handler: Caddy
// refuses it with its own error when it loads the handler.
func (m *modeler) rawHandler(raw json.RawMessage) handlerorder.Handler {
	var head struct {
		Handler string `json:"handler"`
	}
	if json.Unmarshal(raw, &head) != nil {
		return handlerorder.Handler{}
	}
	switch head.Handler {
	case "subroute":
		var sr caddyhttp.Subroute
		if json.Unmarshal(raw, &sr) != nil {
			return handlerorder.Handler{}
		}
		return m.subroute(&sr)
	case "invoke":
		var inv caddyhttp.Invoke
		if json.Unmarshal(raw, &inv) != nil {
			return handlerorder.Handler{}
		}
		return m.invoke(inv.Name)
	}
	return handlerorder.Handler{Name: head.Handler}
}

func (m *modeler) subroute(sr *caddyhttp.Subroute) handlerorder.Handler {
	h := handlerorder.Handler{Name: "subroute", Routes: m.routes(sr.Routes)}
	if sr.Errors != nil {
		h.Errors = m.routes(sr.Errors.Routes)
	}
	return h
}

// invoke models invoke as the named route it runs (nothing for a name the
// server does not have: invoke fails such requests itself).
func (m *modeler) invoke(name string) handlerorder.Handler {
	h := handlerorder.Handler{Name: "invoke"}
	named, ok := m.srv.NamedRoutes[name]
	if !ok || named == nil || m.depth >= maxInvokeDepth {
		return h
	}
	m.depth++
	h.Routes = []handlerorder.Route{m.route(named)}
	m.depth--
	return h
}
