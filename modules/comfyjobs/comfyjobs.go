// Package comfyjobs is the comfy_jobs handler: the /api/v2/jobs routes
// (submit, list, get, workflow, cancel) and the job event stream. It parses
// requests, calls the jobs service and renders its results; errors go back
// to error_envelope.
package comfyjobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/internal/jobs"
	"github.com/comfygate/comfygate/internal/principal"
	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/modules/comfyauth"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/storage"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Handler serves /api/v2/jobs.
type Handler struct {
	// Pool is the worker pool jobs submitted here run on. Default: the
	// comfygate app's default pool.
	Pool string `json:"pool,omitempty"`

	app *comfygate.App
	hub *streamHub
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_jobs",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	// It reads the principal: refuse a config with no comfy_auth before it.
	if err := comfyauth.RequireBefore(ctx, "comfy_jobs"); err != nil {
		return err
	}
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_jobs: %w", err)
	}
	h.app = app.(*comfygate.App)
	if h.Pool == "" {
		h.Pool = h.app.DefaultPool()
	}
	if !h.app.HasPool(h.Pool) {
		return fmt.Errorf("comfy_jobs: no pool named %q in the comfygate app", h.Pool)
	}
	h.hub = newStreamHub()
	// Streams end when this configuration stops (as its requests would).
	go func() {
		select {
		case <-h.app.Stopping():
			h.hub.stop()
		case <-h.hub.ctx.Done():
		}
	}()
	return nil
}

// Cleanup ends this handler's event streams.
func (h *Handler) Cleanup() error {
	if h.hub != nil { // nil when Provision failed early
		h.hub.stop()
	}
	return nil
}

// ServeHTTP routes a jobs request. Paths outside /api/v2/jobs pass to next.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	_, rest, ok := httpx.Route(r.URL.Path)
	if !ok || (rest != "jobs" && !strings.HasPrefix(rest, "jobs/")) {
		return next.ServeHTTP(w, r)
	}
	p, ok := principal.From(r.Context())
	if !ok {
		return apierr.Upstream(errors.New("comfy_jobs: no principal; put comfy_auth before comfy_jobs"))
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	svc, scope, err := h.service(r)
	if err != nil {
		return err
	}
	parts := strings.Split(rest, "/")
	if len(parts) > 1 {
		parts[1] = httpx.CanonicalID(parts[1])
		comfygate.SetPlaceholder(r, comfygate.PlaceholderJobID, parts[1])
	}
	switch {
	case len(parts) == 1:
		switch r.Method {
		case http.MethodPost:
			return h.submit(w, r, svc, p, scope)
		case http.MethodGet, http.MethodHead:
			if scope != nil && scope.Public() {
				// Every anonymous caller is the demo account: a listing
				// would hand each one everybody's jobs.
				return apierr.New(http.StatusForbidden, "forbidden", "the public demo does not list jobs; keep the ids you submitted")
			}
			return h.list(w, r, svc, p)
		}
		return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead, http.MethodPost)
	case len(parts) == 2:
		if !httpx.Reads(r) {
			return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead)
		}
		return h.get(w, r, svc, p, scope, parts[1])
	case len(parts) == 3 && parts[2] == "workflow":
		if !httpx.Reads(r) {
			return httpx.MethodNotAllowed(http.MethodGet, http.MethodHead)
		}
		j, err := svc.Get(r.Context(), p.AccountID, parts[1])
		if err != nil {
			return err
		}
		return httpx.WriteJSON(w, http.StatusOK, map[string]any{"workflow": json.RawMessage(j.Workflow), "format": "api"})
	case len(parts) == 3 && parts[2] == "cancel":
		if r.Method != http.MethodPost {
			return httpx.MethodNotAllowed(http.MethodPost)
		}
		j, err := svc.Cancel(r.Context(), p.AccountID, parts[1])
		if err != nil {
			return err
		}
		return h.writeJob(w, r, svc, http.StatusOK, j, nil)
	case len(parts) == 3 && parts[2] == "events":
		if r.Method != http.MethodGet {
			return httpx.MethodNotAllowed(http.MethodGet)
		}
		return h.events(w, r, svc, p, scope, parts[1])
	}
	return apierr.NotFound("no such route")
}

// service is the jobs service the request works with: the handler's pool,
// or inside a deployment (see comfy_deployment) the deployment's pool,
// scoped to its jobs and, on the public demo, held to the demo's queue cap.
func (h *Handler) service(r *http.Request) (*jobs.Service, *deployments.Scope, error) {
	scope, scoped := deployments.From(r.Context())
	if !scoped {
		return h.app.Jobs(h.Pool), nil, nil
	}
	if !scope.Admitted() {
		return nil, nil, apierr.Upstream(errors.New("comfy_jobs: deployment not admitted; put comfy_auth after comfy_deployment"))
	}
	svc := h.app.Jobs(scope.Deployment.Pool)
	svc.Config.Deployment = scope.ID
	if scope.Public() && scope.Demo.MaxQueued > 0 {
		svc.Config.MaxQueued = min(svc.Config.MaxQueued, scope.Demo.MaxQueued)
	}
	return svc, scope, nil
}

func (h *Handler) submit(w http.ResponseWriter, r *http.Request, svc *jobs.Service, p principal.Principal, scope *deployments.Scope) error {
	limit := svc.Config.Limits.MaxBodyBytes
	if limit <= 0 {
		limit = workflow.DefaultLimits().MaxBodyBytes
	}
	if r.ContentLength > limit {
		return apierr.PayloadTooLarge(limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return httpx.ReadFailure(err, limit)
	}
	j, err := svc.Submit(r.Context(), p.AccountID, body)
	if err != nil {
		return err
	}
	comfygate.SetPlaceholder(r, comfygate.PlaceholderJobID, j.ID)
	if scope != nil {
		if j, err = h.cancelIfStopped(r, svc, p, scope, j); err != nil {
			return err
		}
	}
	return h.writeJob(w, r, svc, http.StatusCreated, j, nil)
}

// cancelIfStopped closes the race between a submission admitted while its
// deployment was ready and a stop recorded meanwhile: the stop cancels the
// jobs it finds after recording the state, so a job written before that
// is canceled by the stop, and one written after sees the state here and
// is canceled now.
func (h *Handler) cancelIfStopped(r *http.Request, svc *jobs.Service, p principal.Principal, scope *deployments.Scope, j storage.Job) (storage.Job, error) {
	d, err := h.app.Store().GetDeployment(r.Context(), scope.ID)
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return storage.Job{}, apierr.Upstream(err)
	}
	if err == nil && d.State != storage.DeploymentStopped {
		return j, nil
	}
	return svc.Cancel(r.Context(), p.AccountID, j.ID)
}

func (h *Handler) get(w http.ResponseWriter, r *http.Request, svc *jobs.Service, p principal.Principal, scope *deployments.Scope, id string) error {
	j, err := svc.Get(r.Context(), p.AccountID, id)
	if err != nil {
		return err
	}
	var log *storage.JobLog
	// The run log: only on a serverless deployment, only on this GET,
	// only once the job is terminal, never on the public demo (which
	// stores it but takes callers with no credential).
	if scope != nil && !scope.Public() && storage.Terminal(j.Status) {
		l, ok, err := svc.Store.GetJobLog(r.Context(), p.AccountID, j.ID)
		switch {
		case errors.Is(err, storage.ErrNotFound):
			return apierr.NotFound("job not found") // deleted since it was read
		case err != nil:
			return apierr.Upstream(err)
		case ok:
			log = &l
		}
	}
	return h.writeJob(w, r, svc, http.StatusOK, j, log)
}

// links builds the response's URLs; output URLs are presigned when the
// blob store presigns.
func (h *Handler) links(r *http.Request) httpx.Links {
	return httpx.LinksFor(r).WithSigner(h.app.Presigner())
}

func (h *Handler) writeJob(w http.ResponseWriter, r *http.Request, svc *jobs.Service, status int, j storage.Job, log *storage.JobLog) error {
	pos, err := svc.QueuePosition(r.Context(), j)
	if err != nil {
		return err
	}
	v := jobView(j, pos, h.links(r), time.Now())
	v.Logs = logView(log)
	return httpx.WriteJSON(w, status, v)
}

func (h *Handler) list(w http.ResponseWriter, r *http.Request, svc *jobs.Service, p principal.Principal) error {
	query, err := jobs.ParseListQuery(r.URL.RawQuery)
	if err != nil {
		return err
	}
	list, next, err := svc.List(r.Context(), p.AccountID, query)
	if err != nil {
		return err
	}
	links, now := h.links(r), time.Now()
	body := map[string]any{}
	if next != "" {
		body["next_cursor"] = next
	}
	views := make([]jobJSON, 0, len(list))
	for _, j := range list {
		views = append(views, jobView(j, nil, links, now))
	}
	body["jobs"] = views
	return httpx.WriteJSON(w, http.StatusOK, body)
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
