package rehost

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// DefaultLifetime is how long a rehosted result lives when a rule sets none.
const DefaultLifetime = 24 * time.Hour

// Rule says which members of a partner's answer hold results and how long
// their copies live.
type Rule struct {
	// URLs select members holding http(s) URLs of results.
	URLs []Path
	// Base64 select members holding base64 payloads (plain or a data: URI).
	Base64 []Path
	// Lifetime is the retention of a copy (DefaultLifetime when 0).
	Lifetime time.Duration
}

// RuleSpec is a rule as written in configuration (catalog JSON, Caddy JSON).
type RuleSpec struct {
	// URLs are paths (see Path) of members holding result URLs.
	URLs []string `json:"urls,omitempty"`
	// Base64 are paths of members holding base64 payloads.
	Base64 []string `json:"base64,omitempty"`
	// Lifetime is a Go duration ("24h"); empty means DefaultLifetime.
	Lifetime string `json:"lifetime,omitempty"`
}

// Compile checks spec and builds its rule.
func (spec RuleSpec) Compile() (*Rule, error) {
	r := &Rule{Lifetime: DefaultLifetime}
	if len(spec.URLs) == 0 && len(spec.Base64) == 0 {
		return nil, errors.New("rehost needs at least one urls or base64 path")
	}
	for _, s := range spec.URLs {
		p, err := ParsePath(s)
		if err != nil {
			return nil, fmt.Errorf("rehost urls: %w", err)
		}
		r.URLs = append(r.URLs, p)
	}
	for _, s := range spec.Base64 {
		p, err := ParsePath(s)
		if err != nil {
			return nil, fmt.Errorf("rehost base64: %w", err)
		}
		r.Base64 = append(r.Base64, p)
	}
	if spec.Lifetime != "" {
		d, err := time.ParseDuration(spec.Lifetime)
		if err != nil {
			return nil, fmt.Errorf("rehost lifetime: %w", err)
		}
		if d <= 0 {
			return nil, fmt.Errorf("rehost lifetime must be positive, got %s", spec.Lifetime)
		}
		r.Lifetime = d
	}
	return r, nil
}

// String is the rule in a stable form ("" for nil), for catalog versions.
func (r *Rule) String() string {
	if r == nil {
		return ""
	}
	var b strings.Builder
	for _, p := range r.URLs {
		b.WriteString("url " + p.String() + "\n")
	}
	for _, p := range r.Base64 {
		b.WriteString("base64 " + p.String() + "\n")
	}
	b.WriteString("lifetime " + r.Lifetime.String())
	return b.String()
}
