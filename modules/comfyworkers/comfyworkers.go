// Package comfyworkers is the admin API module admin.api.comfygate_workers:
// it lists, adds, drains and frees the workers of the running ComfyUI pools
// without a config reload, on Caddy's admin endpoint:
//
//	GET    /comfygate/workers/                       every pool's workers
//	GET    /comfygate/workers/<pool>                 one pool's workers
//	POST   /comfygate/workers/<pool>                 add {"url", "concurrency", "headers"}
//	DELETE /comfygate/workers/<pool>?url=<url>       drain and remove
//	POST   /comfygate/workers/<pool>/free?url=<url>  unload the worker's models
//	GET    /comfygate/scale/                         every comfyui pool's scale signal
//	GET    /comfygate/scale/<pool>                   one pool's (KEDA metrics-api: desiredWorkers)
//
// A worker added here lives as long as the running pool: a config change
// that rebuilds the pool starts again from the config's workers. Removing a
// worker drains it (no new jobs; running ones finish) before it leaves.
package comfyworkers

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/modules/comfygate"
)

func init() {
	caddy.RegisterModule(Admin{})
}

// Admin is the admin.api.comfygate_workers module. It has no options.
type Admin struct{}

// CaddyModule returns the Caddy module information.
func (Admin) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.comfygate_workers",
		New: func() caddy.Module { return new(Admin) },
	}
}

// Routes returns the admin routes.
func (a Admin) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: prefix, Handler: caddy.AdminHandlerFunc(a.serve)},
		{Pattern: scalePrefix, Handler: caddy.AdminHandlerFunc(a.serveScale)}}
}

const (
	prefix      = "/comfygate/workers/"
	scalePrefix = "/comfygate/scale/"
)

// serveScale answers the scale signals, computed from the database: every
// gateway sharing it answers the same.
func (a Admin) serveScale(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodGet {
		return apiError(http.StatusMethodNotAllowed, errors.New("method not allowed"))
	}
	app := comfygate.Running()
	if app == nil {
		return apiError(http.StatusServiceUnavailable, errors.New("no running comfygate app"))
	}
	reports, err := app.ScaleReports(r.Context())
	if err != nil {
		return apiError(http.StatusServiceUnavailable, err)
	}
	name := strings.Trim(strings.TrimPrefix(r.URL.Path, scalePrefix), "/")
	if name == "" {
		return writeJSON(w, map[string]any{"pools": reports})
	}
	for _, rep := range reports {
		if rep.Pool == name {
			return writeJSON(w, rep)
		}
	}
	return apiError(http.StatusNotFound, fmt.Errorf("no comfyui pool %q", name))
}

// addRequest is the body of POST /comfygate/workers/<pool>.
type addRequest struct {
	URL         string            `json:"url"`
	Concurrency int               `json:"concurrency,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
}

func (a Admin) serve(w http.ResponseWriter, r *http.Request) error {
	rest := strings.Trim(strings.TrimPrefix(r.URL.Path, prefix), "/")
	if rest == "" {
		if r.Method != http.MethodGet {
			return apiError(http.StatusMethodNotAllowed, errors.New("method not allowed"))
		}
		all := map[string][]comfyui.WorkerState{}
		for _, name := range comfyui.Registered() {
			if p, ok := comfyui.Lookup(name); ok {
				all[name] = p.Workers()
			}
		}
		return writeJSON(w, map[string]any{"pools": all})
	}
	name, action, _ := strings.Cut(rest, "/")
	pool, ok := comfyui.Lookup(name)
	if !ok {
		return apiError(http.StatusNotFound, fmt.Errorf("no running comfyui pool %q", name))
	}
	switch {
	case action == "" && r.Method == http.MethodGet:
		return writeJSON(w, map[string]any{"workers": pool.Workers()})
	case action == "" && r.Method == http.MethodPost:
		var req addRequest
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
			return apiError(http.StatusBadRequest, fmt.Errorf("decoding the body: %w", err))
		}
		err := pool.AddWorker(comfyui.WorkerConfig{URL: req.URL, Concurrency: req.Concurrency, Headers: req.Headers})
		if err != nil {
			return apiError(http.StatusBadRequest, err)
		}
		return writeJSON(w, map[string]any{"workers": pool.Workers()})
	case action == "" && r.Method == http.MethodDelete:
		if err := pool.RemoveWorker(r.URL.Query().Get("url")); err != nil {
			return apiError(http.StatusNotFound, err)
		}
		return writeJSON(w, map[string]any{"workers": pool.Workers()})
	case action == "free" && r.Method == http.MethodPost:
		if err := pool.Free(r.Context(), r.URL.Query().Get("url")); err != nil {
			status := http.StatusBadGateway
			if errors.Is(err, comfyui.ErrNoWorker) {
				status = http.StatusNotFound
			}
			return apiError(status, err)
		}
		return writeJSON(w, map[string]any{"workers": pool.Workers()})
	case action != "" && action != "free":
		return apiError(http.StatusNotFound, fmt.Errorf("no route %q", r.URL.Path))
	}
	return apiError(http.StatusMethodNotAllowed, errors.New("method not allowed"))
}

func apiError(status int, err error) error {
	return caddy.APIError{HTTPStatus: status, Err: err}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// Interface guards.
var (
	_ caddy.Module      = (*Admin)(nil)
	_ caddy.AdminRouter = (*Admin)(nil)
)
