// Package principal carries the authenticated caller through a request's
// context. comfy_auth sets it; every handler and domain service reads it.
package principal

import "context"

// LocalAccount is the implicit account of a gateway that runs without
// authentication or with one static token.
const LocalAccount = "local"

// Principal is who is calling.
type Principal struct {
	// AccountID owns assets and jobs; every lookup is scoped by it.
	AccountID string
	// WorkspaceID scopes router limits; it equals AccountID unless a JWT says otherwise.
	WorkspaceID string
	// KeyID names the credential used (an API key id), for logs; empty otherwise.
	KeyID string
	// Entitlements are the router entitlement groups the caller may use.
	Entitlements []string
	// RouterEnabled reports whether the caller may call the model router.
	RouterEnabled bool
}

type ctxKey struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// From returns the principal in ctx.
func From(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(ctxKey{}).(Principal)
	return p, ok
}
