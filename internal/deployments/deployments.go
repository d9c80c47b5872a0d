// Package deployments is the domain of serverless deployments: where a
// request's deployment id comes from (a host label under a configured base
// domain, or the /deployment/{id} path prefix), the scope a resolved
// deployment gives the rest of the request, and who is admitted to it in
// which state. It knows nothing of Caddy; the comfy_deployment handler and
// the tls.permission.comfy_deployment module use it.
package deployments

import (
	"net/http"
	"slices"
	"strings"

	"github.com/comfygate/comfygate/internal/apierr"
	"github.com/comfygate/comfygate/storage"
)

// PathPrefix is the first segment of a prefix-addressed deployment:
// /deployment/{id}/api/v2/…
const PathPrefix = "/deployment/"

// Domains are the base domains whose first label names a deployment:
// <id>.run.example.com, <id>.stg.run.example.com.
type Domains []string

// NewDomains normalizes base domains (lower case, no dots at either end)
// and orders them longest first, so that <id>.stg.run.example.com is
// matched under stg.run.example.com before run.example.com is tried.
func NewDomains(ds []string) Domains {
	out := make(Domains, 0, len(ds))
	for _, d := range ds {
		if d = strings.Trim(strings.ToLower(d), "."); d != "" {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

// IDFromHost returns the deployment label of host (with or without a
// port) under one of the domains: the host must be exactly <label>.<domain>.
// ok is false when the host is not under any of them. The label is not
// checked here (see storage.ValidDeploymentID); "Bad" is returned as "bad"
// because host names are case-insensitive.
func (ds Domains) IDFromHost(host string) (id string, ok bool) {
	host = strings.TrimSuffix(strings.ToLower(stripPort(host)), ".")
	for _, d := range ds {
		label, found := strings.CutSuffix(host, "."+d)
		if found && label != "" && !strings.Contains(label, ".") {
			return label, true
		}
	}
	return "", false
}

// stripPort removes a :port (and IPv6 brackets are left alone: an address
// is never under a base domain).
func stripPort(host string) string {
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		return host[:i]
	}
	return host
}

// IDFromPath splits a prefix-addressed path into the deployment id, the
// mount prefix (/deployment/{id}) and what follows it (starting with '/',
// or "" when the path ends at the id). ok is false when the path does not
// start with /deployment/.
func IDFromPath(path string) (id, mount, rest string, ok bool) {
	after, found := strings.CutPrefix(path, PathPrefix)
	if !found {
		return "", "", "", false
	}
	id, rest, _ = strings.Cut(after, "/")
	if rest != "" || strings.HasSuffix(after, "/") {
		rest = "/" + rest
	}
	return id, PathPrefix + id, rest, true
}

// Resolve names the deployment a request addresses from its host and path:
// the host's label under one of the domains, or else the /deployment/{id}
// path prefix. A host-addressed request may also carry its own prefix
// (/deployment/{id} with the host's id), which is then mount, to be
// stripped; a prefix naming another deployment than the host contradicts
// it, and ok is false, as it is when neither names one. mount is "" when
// the path has no prefix.
func (ds Domains) Resolve(host, path string) (id, mount string, ok bool) {
	hostID, byHost := ds.IDFromHost(host)
	pathID, mount, _, byPath := IDFromPath(path)
	switch {
	case byHost && byPath && pathID != hostID:
		return "", "", false
	case byHost:
		return hostID, mount, true
	case byPath:
		return pathID, mount, true
	}
	return "", "", false
}

// NotFound is the answer for a deployment that does not exist, is not the
// caller's, or is not named at all: deliberately one answer.
func NotFound() *apierr.Error { return apierr.NotFound("no such deployment") }

// NotReady is the contract's deployment_not_ready: back off and retry.
func NotReady(retryAfter int) *apierr.Error {
	return apierr.New(http.StatusTooManyRequests, "deployment_not_ready",
		"the deployment is not ready yet; retry after the indicated delay").WithRetryAfter(retryAfter)
}

// Stopped is the contract's deployment_stopped: a retry cannot succeed.
func Stopped() *apierr.Error {
	return apierr.New(http.StatusUnprocessableEntity, "deployment_stopped",
		"the deployment is stopped; it serves no requests")
}

// RateLimited is a public demo caller over its submit rate.
func RateLimited(retryAfter int) *apierr.Error {
	return apierr.New(http.StatusTooManyRequests, "rate_limited",
		"too many submissions from your address; retry after the indicated delay").WithRetryAfter(retryAfter)
}

// StateError is what a request to a deployment in state gets once the
// caller is admitted: nil for ready when its pool serves the request
// (served: a worker takes jobs, or storage serves it).
func StateError(state string, served bool, retryAfter int) error {
	switch state {
	case storage.DeploymentReady:
		if served {
			return nil
		}
		return NotReady(retryAfter)
	case storage.DeploymentProvisioning, storage.DeploymentStarting:
		return NotReady(retryAfter)
	}
	return Stopped()
}
