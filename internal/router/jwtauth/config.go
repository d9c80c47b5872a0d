// Package jwtauth verifies the router's bearer JWTs and extracts who is
// calling (workspace), what they may use (entitlements) and whether the
// router is switched on for them.
//
// Security rules, all enforced at construction or per token:
//   - every key is pinned to exactly one algorithm; a token is only checked
//     against keys pinned to its header `alg`, so an RSA public key can never
//     be used as an HMAC secret, and `none` is never accepted;
//   - `kid` selects the key when the token carries one;
//   - `exp` is required; `iss` and `aud` are checked when configured;
//   - clock leeway is at most 60 s.
//
// Every failure is reported as ErrUnauthorized (wrapped with a reason for
// debug logs; the reason never contains the token), except a valid token
// whose router flag is off, which is ErrNotEnabled.
package jwtauth

import (
	"errors"
	"fmt"
	"time"
)

// MaxLeeway caps Config.Leeway.
const MaxLeeway = 60 * time.Second

// Default claim names.
const (
	DefaultWorkspaceClaim    = "workspace_id"
	DefaultEntitlementsClaim = "entitlements"
	DefaultEnabledClaim      = "router_enabled"
)

// Config configures a Verifier. It is JSON-tagged so the Caddy module can
// embed it directly in its own config.
type Config struct {
	// Keys are individually configured verification keys.
	Keys []KeyConfig `json:"keys,omitempty"`
	// JWKSFile is a JSON Web Key Set file ({"keys":[...]}) read once at
	// provisioning. Keys with "use":"enc" are skipped. Each key is pinned to
	// its "alg"; without one, EC keys take the algorithm of their curve,
	// OKP/Ed25519 takes EdDSA, RSA takes RS256, and "oct" keys are refused.
	JWKSFile string `json:"jwks_file,omitempty"`

	// Issuer, when set, must equal the token's `iss`.
	Issuer string `json:"issuer,omitempty"`
	// Audience, when set, must be one of the token's `aud` values.
	Audience string `json:"audience,omitempty"`
	// Leeway tolerates clock skew on exp/nbf/iat, in nanoseconds as Caddy
	// encodes durations in JSON. At most MaxLeeway; 0 means none.
	Leeway time.Duration `json:"leeway,omitempty"`

	// WorkspaceClaim names the claim holding the workspace id (default
	// "workspace_id"); when it is absent or empty, `sub` is used instead.
	WorkspaceClaim string `json:"workspace_claim,omitempty"`
	// EntitlementsClaim names the claim holding the caller's entitlement
	// groups, an array of strings (default "entitlements"). Absent means none.
	EntitlementsClaim string `json:"entitlements_claim,omitempty"`
	// EnabledClaim names the boolean router-enabled claim (default
	// "router_enabled").
	EnabledClaim string `json:"enabled_claim,omitempty"`
	// RequireEnabledClaim decides what an absent enabled claim means. The
	// default (false) treats absence as enabled: the flag is a rollout
	// switch, not a security control, so issuers that know nothing of it
	// keep working and only an explicit `false` yields not_enabled. Set it
	// to true to run an opt-in rollout where only tokens carrying `true` may
	// use the router.
	RequireEnabledClaim bool `json:"require_enabled_claim,omitempty"`
}

// KeyConfig is one verification key. Exactly one of PEM, PEMFile, Secret and
// SecretFile is set.
type KeyConfig struct {
	// ID matches the token header `kid`. Optional: a key without an ID is
	// tried for tokens whose kid matches no key, and for tokens without kid.
	ID string `json:"kid,omitempty"`
	// Algorithm is the one algorithm this key accepts: HS256/384/512 for
	// secrets; RS256/384/512 or PS256/384/512 for RSA; ES256/384/512 for
	// ECDSA (matching the curve); EdDSA for Ed25519. Required.
	Algorithm string `json:"alg"`
	// PEM is an inline PEM public key (PKIX "PUBLIC KEY", PKCS#1 "RSA PUBLIC
	// KEY", or a certificate whose public key is used).
	PEM string `json:"pem,omitempty"`
	// PEMFile is a path to such a PEM file.
	PEMFile string `json:"pem_file,omitempty"`
	// Secret is an HMAC secret (the Caddy side resolves {env.X} first). At
	// least 32 bytes.
	Secret string `json:"secret,omitempty"`
	// SecretFile is a path to a file holding the HMAC secret (trailing
	// newlines are trimmed).
	SecretFile string `json:"secret_file,omitempty"`
}

// MinSecretLen is the shortest HMAC secret accepted (RFC 7518 §3.2 asks for
// a key at least as long as the hash output; 32 bytes covers HS256).
const MinSecretLen = 32

func (c *Config) withDefaults() (Config, error) {
	out := *c
	if out.WorkspaceClaim == "" {
		out.WorkspaceClaim = DefaultWorkspaceClaim
	}
	if out.EntitlementsClaim == "" {
		out.EntitlementsClaim = DefaultEntitlementsClaim
	}
	if out.EnabledClaim == "" {
		out.EnabledClaim = DefaultEnabledClaim
	}
	if out.Leeway < 0 || out.Leeway > MaxLeeway {
		return out, fmt.Errorf("leeway %s is outside 0..%s", out.Leeway, MaxLeeway)
	}
	if len(out.Keys) == 0 && out.JWKSFile == "" {
		return out, errors.New("no verification keys: set keys or jwks_file")
	}
	return out, nil
}
