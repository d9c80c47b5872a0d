package jwtauth

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// ErrUnauthorized is any token that cannot be trusted: malformed, badly
// signed, expired, wrong issuer or audience, or missing the workspace. The
// wrapped reason is for debug logs; clients only ever see "unauthorized".
var ErrUnauthorized = errors.New("unauthorized")

// ErrNotEnabled is a valid token whose router-enabled flag is off.
var ErrNotEnabled = errors.New("router not enabled for this caller")

// MaxTokenLen bounds the work an oversized Authorization header can cause.
const MaxTokenLen = 8 << 10

// Claims is what the router needs from a verified token.
type Claims struct {
	Workspace    string
	Entitlements []string
	Enabled      bool
}

// Verifier checks router JWTs. Its configuration is immutable and it is
// safe for concurrent use; it remembers verified tokens (see cache.go).
type Verifier struct {
	cfg     Config
	keys    []*key
	methods []string
	cache   tokenCache
}

// New builds a Verifier. readFile reads pem_file, secret_file and jwks_file
// paths; nil means os.ReadFile.
func New(cfg Config, readFile func(string) ([]byte, error)) (*Verifier, error) {
	if readFile == nil {
		readFile = os.ReadFile
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	v := &Verifier{cfg: c}
	for i, kc := range c.Keys {
		k, err := keyFromConfig(kc, readFile)
		if err != nil {
			return nil, fmt.Errorf("jwt key %d (kid %q): %w", i, kc.ID, err)
		}
		v.keys = append(v.keys, k)
	}
	if c.JWKSFile != "" {
		data, err := readFile(c.JWKSFile)
		if err != nil {
			return nil, fmt.Errorf("jwks_file: %w", err)
		}
		ks, err := parseJWKS(data)
		if err != nil {
			return nil, fmt.Errorf("jwks_file %s: %w", c.JWKSFile, err)
		}
		v.keys = append(v.keys, ks...)
	}
	seen := map[string]bool{}
	for _, k := range v.keys {
		if !seen[k.alg] {
			seen[k.alg] = true
			v.methods = append(v.methods, k.alg)
		}
	}
	sort.Strings(v.methods)
	return v, nil
}

func unauthorized(reason string, args ...any) error {
	return fmt.Errorf("%w: "+reason, append([]any{ErrUnauthorized}, args...)...)
}

// Verify checks token at time now and extracts the caller. Errors are
// ErrUnauthorized or ErrNotEnabled (test with errors.Is). The returned
// Claims may be shared with other calls: do not modify them.
func (v *Verifier) Verify(token string, now time.Time) (Claims, error) {
	if token == "" {
		return Claims{}, unauthorized("no token")
	}
	if len(token) > MaxTokenLen {
		return Claims{}, unauthorized("token longer than %d bytes", MaxTokenLen)
	}
	opts := v.options(now)
	sum := sha256.Sum256([]byte(token))
	if hit := v.cache.get(sum); hit != nil {
		if err := jwt.NewValidator(opts...).Validate(hit.mc); err != nil {
			v.cache.drop(sum)
			return Claims{}, unauthorized("%v", err)
		}
		return hit.claims, hit.err
	}
	mc := jwt.MapClaims{}
	if _, err := jwt.NewParser(opts...).ParseWithClaims(token, mc, v.keyFor); err != nil {
		// golang-jwt's messages name the failed check, never the token.
		return Claims{}, unauthorized("%v", err)
	}
	c, err := v.extract(mc)
	if err == nil || errors.Is(err, ErrNotEnabled) {
		c.Entitlements = slices.Clip(c.Entitlements) // shared by every hit
		v.cache.put(sum, &verified{mc: mc, claims: c, err: err})
	}
	return c, err
}

// options are the parser's checks at time now; a remembered token's claims
// go through the same ones.
func (v *Verifier) options(now time.Time) []jwt.ParserOption {
	opts := []jwt.ParserOption{
		jwt.WithValidMethods(v.methods),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.cfg.Leeway),
		jwt.WithTimeFunc(func() time.Time { return now }),
	}
	if v.cfg.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.cfg.Issuer))
	}
	if v.cfg.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.cfg.Audience))
	}
	return opts
}

// keyFor picks the keys pinned to the token's algorithm, narrowed by kid:
// a kid that names configured keys selects only those; a kid that names none
// (or no kid) falls back to the keys configured without an id.
func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	var byKid, anonymous []jwt.VerificationKey
	for _, k := range v.keys {
		if k.alg != alg {
			continue
		}
		switch {
		case kid != "" && k.id == kid:
			byKid = append(byKid, k.pub)
		case k.id == "":
			anonymous = append(anonymous, k.pub)
		}
	}
	if len(byKid) > 0 {
		return jwt.VerificationKeySet{Keys: byKid}, nil
	}
	if len(anonymous) > 0 {
		return jwt.VerificationKeySet{Keys: anonymous}, nil
	}
	if kid != "" {
		return nil, fmt.Errorf("no %s key with kid %q", alg, kid)
	}
	return nil, fmt.Errorf("no %s key without a kid; the token must name one", alg)
}

func (v *Verifier) extract(mc jwt.MapClaims) (Claims, error) {
	var c Claims
	switch ws := mc[v.cfg.WorkspaceClaim].(type) {
	case string:
		c.Workspace = ws
	case nil:
	default:
		return Claims{}, unauthorized("claim %q is not a string", v.cfg.WorkspaceClaim)
	}
	if c.Workspace == "" {
		sub, err := mc.GetSubject()
		if err != nil {
			return Claims{}, unauthorized("sub: %v", err)
		}
		c.Workspace = sub
	}
	if c.Workspace == "" {
		return Claims{}, unauthorized("no workspace: neither %q nor sub is set", v.cfg.WorkspaceClaim)
	}
	switch ents := mc[v.cfg.EntitlementsClaim].(type) {
	case nil:
	case []any:
		c.Entitlements = make([]string, 0, len(ents))
		for _, e := range ents {
			s, ok := e.(string)
			if !ok {
				return Claims{}, unauthorized("claim %q holds a non-string", v.cfg.EntitlementsClaim)
			}
			c.Entitlements = append(c.Entitlements, s)
		}
	default:
		return Claims{}, unauthorized("claim %q is not an array of strings", v.cfg.EntitlementsClaim)
	}
	switch en := mc[v.cfg.EnabledClaim].(type) {
	case bool:
		c.Enabled = en
	case nil:
		_, present := mc[v.cfg.EnabledClaim]
		if present { // explicit null reads as "not enabled"
			c.Enabled = false
		} else {
			c.Enabled = !v.cfg.RequireEnabledClaim
		}
	default:
		return Claims{}, unauthorized("claim %q is not a boolean", v.cfg.EnabledClaim)
	}
	if !c.Enabled {
		return c, ErrNotEnabled
	}
	return c, nil
}
