package deployments

import (
	"context"

	"github.com/comfygate/comfygate/storage"
)

// Demo is what the public demo deployment is held to, so that callers
// with no credential cannot fill it.
type Demo struct {
	// MaxQueued bounds the queue of the demo's pool while demo jobs are
	// submitted (0: the app's bound).
	MaxQueued int
	// MaxUploadBytes bounds one upload (0: the app's bound).
	MaxUploadBytes int64
	// MaxStreams bounds the event streams open on the demo in this process
	// (0: the app's per-account bound).
	MaxStreams int
	// Rate limits submissions (job submits and uploads) per client address;
	// nil means unlimited.
	Rate *RateLimiter
}

// Scope is the deployment a request addresses, carried in its context
// from comfy_deployment to the handlers after it.
type Scope struct {
	// ID is the deployment id the request named (a valid DNS label).
	ID string
	// Deployment is the record; Found is false when none has that id.
	Deployment storage.Deployment
	Found      bool
	// Mount is the path prefix the request came under (/deployment/{id}),
	// or "" when it had none (host addressing). Links keep it.
	Mount string
	// PoolReady reports whether the deployment's pool exists in this
	// configuration and has a healthy worker that takes jobs.
	PoolReady bool
	// Need is what the request needs of the pool (NeedOf); JobID is the
	// job of a NeedJobProgress stream.
	Need  Need
	JobID string
	// JobCanProgress, when set, reports whether the account's job id in
	// this deployment can progress without a new worker (CanProgress);
	// true for a job it does not have, which the handler answers
	// not_found. Admit asks it of a NeedJobProgress stream while the pool
	// is not ready.
	JobCanProgress func(account, id string) (bool, error)
	// RetryAfter is the Retry-After of deployment_not_ready, in seconds.
	RetryAfter int
	// NoWorker, when set, is called when an admitted caller's request
	// needs a worker the ready deployment's pool does not have: it records
	// the demand (the pool's scale signal counts it) and returns the
	// Retry-After to answer.
	NoWorker func() int
	// Demo holds the public demo's caps; they apply when Public.
	Demo Demo
	// ClientIP keys the demo's submit rate.
	ClientIP string
	// Submit reports that the request creates a job or an asset.
	Submit bool

	admitted bool
}

// Public reports whether the request addresses the public demo.
func (s *Scope) Public() bool { return s.Found && s.Deployment.Public }

// Admit lets the caller (authenticated as account, or anonymous on the
// public demo) into the deployment, or returns the contract's answer:
// not_found when the deployment does not exist or is another account's
// (the two are one answer), then deployment_not_ready (429 + Retry-After)
// while provisioning or starting, or while its pool has no worker taking
// jobs for a request that needs one (see Need: what storage serves is
// served), deployment_stopped (422) once stopped, and on the public demo
// rate_limited (429 + Retry-After) for a client over its submit rate.
func (s *Scope) Admit(account string) error {
	if !s.Found || (!s.Deployment.Public && account != s.Deployment.AccountID) {
		return NotFound()
	}
	served, err := s.served(account)
	if err != nil {
		return err
	}
	if s.Deployment.State == storage.DeploymentReady && !served && s.NoWorker != nil {
		s.RetryAfter = s.NoWorker()
	}
	if err := StateError(s.Deployment.State, served, s.RetryAfter); err != nil {
		return err
	}
	if s.Public() && s.Submit && s.Demo.Rate != nil {
		if ok, wait := s.Demo.Rate.Allow(s.Deployment.ID + " " + s.ClientIP); !ok {
			return RateLimited(wait)
		}
	}
	s.admitted = true
	return nil
}

// served reports whether a ready deployment's pool, as it is, serves the
// request: always while the pool takes jobs, and without a worker taking
// jobs whatever storage serves. It looks nothing up for a deployment in
// another state, which StateError answers whatever the pool.
func (s *Scope) served(account string) (bool, error) {
	if s.Deployment.State != storage.DeploymentReady || s.PoolReady {
		return s.PoolReady, nil
	}
	switch s.Need {
	case NeedStorage:
		return true, nil
	case NeedJobProgress:
		if s.JobCanProgress != nil {
			return s.JobCanProgress(account, s.JobID)
		}
	}
	return false, nil
}

// Admitted reports whether Admit let the caller in. Handlers refuse to
// serve a scope nobody admitted (comfy_auth missing after comfy_deployment).
func (s *Scope) Admitted() bool { return s.admitted }

type scopeKey struct{}

// WithScope returns ctx carrying s.
func WithScope(ctx context.Context, s *Scope) context.Context {
	return context.WithValue(ctx, scopeKey{}, s)
}

// From returns the request's deployment scope, if it addresses one.
func From(ctx context.Context) (*Scope, bool) {
	s, ok := ctx.Value(scopeKey{}).(*Scope)
	return s, ok && s != nil
}
