// Package comfydeployment is the comfy_deployment handler: on a serverless
// surface it resolves which deployment a request addresses — the first
// label of the host under a configured base domain, or the
// /deployment/{id} path prefix, which it strips for the handlers below
// while the links they build keep it — and puts the deployment's scope in
// the request context. comfy_auth, which must follow it, admits the caller
// (the owner's API key, or anyone on the public demo) and answers the
// deployment's state (a ready deployment whose pool has no worker taking
// jobs refuses only what needs one: deployments.NeedOf); comfy_jobs and
// comfy_assets then work inside the deployment. Resolution is a handler
// rather than an app option so that one gateway can serve deployment sites
// beside self-hosted or cloud ones.
package comfydeployment

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/internal/deployments"
	"github.com/comfygate/comfygate/internal/httpx"
	"github.com/comfygate/comfygate/modules/comfygate"
	"github.com/comfygate/comfygate/storage"
)

func init() {
	caddy.RegisterModule(Handler{})
}

// Defaults of the public demo's caps.
const (
	DefaultRetryAfter        = 5 * time.Second
	DefaultDemoMaxQueued     = 10
	DefaultDemoMaxUpload     = 10 << 20
	DefaultDemoMaxStreams    = 4
	DefaultDemoSubmits       = 10
	DefaultDemoSubmitsWindow = time.Minute
)

// Handler resolves the deployment a request addresses.
type Handler struct {
	// Domains are base domains whose first label names a deployment:
	// with run.example.com, dep-1.run.example.com is deployment dep-1.
	// Requests whose host is under none of them must use the
	// /deployment/{id} path prefix.
	Domains []string `json:"domains,omitempty"`
	// RetryAfter is the Retry-After of deployment_not_ready. Default 5s.
	// While a ready deployment's pool has no worker, the answer is the
	// pool's measured cold start instead (bounded by the pool's
	// retry_after_max) once one was measured.
	RetryAfter caddy.Duration `json:"retry_after,omitempty"`
	// Demo holds the caps of public deployments, which take callers with
	// no credential. Defaults apply when it is absent.
	Demo *DemoConfig `json:"demo,omitempty"`

	app     *comfygate.App
	domains deployments.Domains
	demo    deployments.Demo
}

// DemoConfig caps the public demo deployment.
type DemoConfig struct {
	// MaxQueued bounds the queue of the demo's pool while demo jobs are
	// submitted: over it, 429 queue_full. Default 10.
	MaxQueued int `json:"max_queued,omitempty"`
	// MaxUploadBytes bounds one upload. Default 10 MiB.
	MaxUploadBytes int64 `json:"max_upload_bytes,omitempty"`
	// MaxStreams bounds the event streams open on a demo deployment in
	// one gateway process. Default 4.
	MaxStreams int `json:"max_streams,omitempty"`
	// Submits is how many job submissions and uploads one client address
	// may make per SubmitsWindow in one gateway process: over it, 429
	// rate_limited with Retry-After. Default 10 per minute.
	Submits       int            `json:"submits,omitempty"`
	SubmitsWindow caddy.Duration `json:"submits_window,omitempty"`
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.comfy_deployment",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision applies defaults and reaches the app.
func (h *Handler) Provision(ctx caddy.Context) error {
	app, err := ctx.App("comfygate")
	if err != nil {
		return fmt.Errorf("comfy_deployment: %w", err)
	}
	h.app = app.(*comfygate.App)
	h.domains = deployments.NewDomains(h.Domains)
	if h.RetryAfter == 0 {
		h.RetryAfter = caddy.Duration(DefaultRetryAfter)
	}
	if h.Demo == nil {
		h.Demo = &DemoConfig{}
	}
	d := h.Demo
	if d.MaxQueued == 0 {
		d.MaxQueued = DefaultDemoMaxQueued
	}
	if d.MaxUploadBytes == 0 {
		d.MaxUploadBytes = DefaultDemoMaxUpload
	}
	if d.MaxStreams == 0 {
		d.MaxStreams = DefaultDemoMaxStreams
	}
	if d.Submits == 0 {
		d.Submits = DefaultDemoSubmits
	}
	if d.SubmitsWindow == 0 {
		d.SubmitsWindow = caddy.Duration(DefaultDemoSubmitsWindow)
	}
	h.demo = deployments.Demo{MaxQueued: d.MaxQueued, MaxUploadBytes: d.MaxUploadBytes, MaxStreams: d.MaxStreams}
	if d.Submits > 0 && d.SubmitsWindow > 0 {
		h.demo.Rate = deployments.NewRateLimiter(d.Submits, time.Duration(d.SubmitsWindow))
	}
	return nil
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	for _, d := range h.Domains {
		if strings.Trim(d, ".") == "" || strings.ContainsAny(d, "/: ") {
			return fmt.Errorf("comfy_deployment: %q is not a domain name", d)
		}
	}
	d := h.Demo
	if h.RetryAfter < caddy.Duration(time.Second) {
		return errors.New("comfy_deployment: retry_after must be at least 1s")
	}
	if d.MaxQueued < 0 || d.MaxUploadBytes < 0 || d.MaxStreams < 0 || d.Submits < 0 || d.SubmitsWindow < 0 {
		return errors.New("comfy_deployment: demo caps must not be negative")
	}
	return nil
}

// ServeHTTP resolves the deployment and calls next inside its scope.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	// The deployment is named by the path Caddy's matchers saw (cleaned):
	// a path in another form is refused, not resolved.
	if !httpx.CanonicalPath(r.URL.Path) {
		return apierr.NotFound("no such route")
	}
	// The host's label under a base domain, else the path prefix; a
	// prefix naming another deployment than the host is refused.
	id, mount, ok := h.domains.Resolve(r.Host, r.URL.Path)
	if !ok || !storage.ValidDeploymentID(id) {
		// Nothing is looked up: the request names no deployment, two
		// different ones, or an id no deployment can have.
		return deployments.NotFound()
	}
	if err := h.app.Ready(); err != nil {
		return apierr.Upstream(err)
	}
	d, err := h.app.Store().GetDeployment(r.Context(), id)
	found := err == nil
	if err != nil && !errors.Is(err, storage.ErrNotFound) {
		return apierr.Upstream(err)
	}
	if mount != "" {
		stripPrefix(r, mount)
	}
	if !strings.HasPrefix(r.URL.Path, httpx.APIRoot) {
		// A deployment serves the v2 API right under its host or prefix;
		// anything between would be copied into its links.
		return apierr.NotFound("no such route")
	}
	need, jobID := deployments.NeedOf(r.Method, r.URL.Path)
	scope := &deployments.Scope{
		ID: id, Deployment: d, Found: found, Mount: mount,
		PoolReady:  found && h.app.PoolReady(d.Pool),
		Need:       need,
		JobID:      jobID,
		RetryAfter: int(time.Duration(h.RetryAfter).Seconds()),
		Demo:       h.demo,
		ClientIP:   clientIP(r),
		Submit:     isSubmit(r),
	}
	if found && !scope.PoolReady {
		scope.NoWorker = func() int { return h.app.RecordDemand(r.Context(), d.Pool, time.Duration(h.RetryAfter)) }
		scope.JobCanProgress = func(account, job string) (bool, error) { return h.jobCanProgress(r, d, account, job) }
	}
	comfygate.SetPlaceholder(r, comfygate.PlaceholderDeployment, id)
	ctx := httpx.WithMount(deployments.WithScope(r.Context(), scope), mount)
	return next.ServeHTTP(w, r.WithContext(ctx))
}

// jobCanProgress reports whether the account's job in deployment d can
// progress on its pool as it is (deployments.CanProgress); a job the
// deployment does not have is left to the handler to answer not_found.
func (h *Handler) jobCanProgress(r *http.Request, d storage.Deployment, account, id string) (bool, error) {
	svc := h.app.Jobs(d.Pool)
	svc.Config.Deployment = d.ID
	j, err := svc.Get(r.Context(), account, id)
	if e, ok := apierr.As(err); ok && e.Status == http.StatusNotFound {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return deployments.CanProgress(j.Status, h.liveWorker(d.Pool)), nil
}

// liveWorker reports whether pool has a healthy worker, draining ones
// included: a draining worker still ends the jobs it runs.
func (h *Handler) liveWorker(pool string) bool {
	for _, st := range h.app.PoolStates() {
		if st.Name == pool {
			return slices.ContainsFunc(st.Workers, func(w comfyui.WorkerState) bool { return w.Healthy })
		}
	}
	return false
}

// stripPrefix removes the mount prefix from the request's path (and its
// escaped form), as Caddy's uri strip_prefix does.
func stripPrefix(r *http.Request, mount string) {
	r.URL.Path = strings.TrimPrefix(r.URL.Path, mount)
	if r.URL.RawPath != "" {
		r.URL.RawPath = strings.TrimPrefix(r.URL.RawPath, mount)
	}
	if r.URL.Path == "" {
		r.URL.Path = "/"
	}
}

// clientIP is the client address Caddy determined (trusted proxies
// applied), or the connection's.
func clientIP(r *http.Request) string {
	if ip, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok && ip != "" {
		return ip
	}
	return r.RemoteAddr
}

// isSubmit reports whether the request creates a job or an asset: what
// the public demo's submit rate counts.
func isSubmit(r *http.Request) bool {
	if r.Method != http.MethodPost {
		return false
	}
	_, rest, ok := httpx.Route(r.URL.Path)
	return ok && (rest == "jobs" || rest == "assets" || rest == "assets/from-hash")
}

// Interface guards
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
)
