package catalog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/router/rehost"
)

// File format
//
// The catalog is one JSON object with a "models" array; unknown fields are
// rejected so a typo in an operator's file fails the config load instead of
// silently dropping a setting:
//
//	{
//	  "models": [
//	    {
//	      "id": "fal/flux-dev",                    // {provider}/{model}
//	      "adapter": "fal",                        // http | fal | bfl
//	      "upstream": "https://queue.fal.run/fal-ai/flux/dev",
//	      "credential": "{env.FAL_KEY}",           // resolved by the caller's resolve hook
//	      "credential_header": {"name": "Authorization", "prefix": "Key"},
//	      "input_schema": "schemas/flux-dev.json", // path relative to the catalog file, or an inline object
//	      "billing": {"charges_on_policy_rejection": "yes"},
//	      "price_cents": 4,
//	      "deadline": "10m",
//	      "poll_interval": "1s",
//	      "entitlement": "beta",                   // empty: visible to everyone
//	      "rehost": {"urls": ["result.sample"], "base64": ["images[*]"], "lifetime": "24h"}
//	    }
//	  ]
//	}
//
// Field rules:
//   - id: provider/model, each segment matching ^[a-z0-9]+([._-][a-z0-9]+)*$;
//     provider ≤ 64, model ≤ 128. No variant segment: the list and the
//     detail answer the id as a RouterModelId, which has none. Duplicates
//     are rejected.
//   - adapter: required, one of http, fal, bfl.
//   - upstream: required absolute URL with a host; https unless
//     Options.AllowHTTPUpstream (tests) is set.
//   - credential: optional; passed through resolve (Caddy's replacer) once;
//     a non-empty template that resolves to "" is an error.
//   - credential_header: optional. Default per adapter: http → "Authorization:
//     Bearer <credential>", fal → "Authorization: Key <credential>", bfl →
//     "x-key: <credential>". When given, name is required and prefix (may be
//     empty) is joined to the credential with one space.
//   - input_schema: optional; absent means no schema was authored (no
//     validation, no input_schema_url). A string is a file path (relative to
//     the catalog's directory); an object is an inline OpenAPI document,
//     served compacted. The document must compile (see package schema).
//   - billing.charges_on_policy_rejection: yes | no | unknown; anything else
//     (including absent) is served as unknown.
//   - price_cents: integer ≥ 0 (default 0), reserved against the workspace's
//     spend ceiling at admission.
//   - deadline: Go duration > 0 (default 10m), the router's own bound.
//   - poll_interval: Go duration > 0 (default 1s); used by fal and bfl and
//     returned as Retry-After on a 504 with a held handle.
//   - entitlement: optional group name; callers see and call the model only
//     when their entitlements contain it.
//   - rehost: optional; members of a successful answer that hold result URLs
//     (urls) or base64 payloads (base64), as paths of package rehost, and the
//     lifetime of the copies (Go duration > 0, default 24h). It replaces the
//     model_router's per-provider rehost rule for this model.

// DefaultDeadline is the router's own bound when an entry sets none.
const DefaultDeadline = 10 * time.Minute

// DefaultPollInterval is the handle polling interval when an entry sets none.
const DefaultPollInterval = time.Second

type fileCatalog struct {
	Models []fileModel `json:"models"`
}

type fileModel struct {
	ID               string           `json:"id"`
	Adapter          string           `json:"adapter"`
	Upstream         string           `json:"upstream"`
	Credential       string           `json:"credential"`
	CredentialHeader *fileHeader      `json:"credential_header"`
	InputSchema      json.RawMessage  `json:"input_schema"`
	Billing          fileBilling      `json:"billing"`
	PriceCents       *int64           `json:"price_cents"`
	Deadline         string           `json:"deadline"`
	PollInterval     string           `json:"poll_interval"`
	Entitlement      string           `json:"entitlement"`
	Rehost           *rehost.RuleSpec `json:"rehost"`
}

type fileHeader struct {
	Name   string `json:"name"`
	Prefix string `json:"prefix"`
}

type fileBilling struct {
	ChargesOnPolicyRejection string `json:"charges_on_policy_rejection"`
}

// Options tune loading. The zero value is usable.
type Options struct {
	// Dir is the directory relative input_schema paths are resolved against;
	// LoadFile sets it to the catalog file's directory.
	Dir string
	// ReadFile reads schema files; nil means os.ReadFile.
	ReadFile func(string) ([]byte, error)
	// CursorKey is the HMAC key for page cursors. Empty means 32 random bytes,
	// which is right for one instance; several instances behind one balancer
	// need a shared key or a walk that changes instance is refused.
	CursorKey []byte
	// AllowHTTPUpstream admits plain-http upstreams (local test peers).
	AllowHTTPUpstream bool
	// Rehost is the rehost rule of each provider (the first id segment),
	// for the models whose entry has none of its own.
	Rehost map[string]*rehost.Rule
}

// LoadFile reads the catalog at path and loads it with Options.Dir set to the
// file's directory (unless already set).
func LoadFile(path string, resolve func(string) string, opts Options) (*Catalog, error) {
	read := opts.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	data, err := read(path)
	if err != nil {
		return nil, fmt.Errorf("read catalog: %w", err)
	}
	if opts.Dir == "" {
		opts.Dir = filepath.Dir(path)
	}
	return Load(data, resolve, opts)
}

// Load parses a catalog document. resolve, when non-nil, is applied to each
// credential (the Caddy side passes its replacer so "{env.X}" works); the
// catalog itself never interprets placeholders.
func Load(data []byte, resolve func(string) string, opts Options) (*Catalog, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var fc fileCatalog
	if err := dec.Decode(&fc); err != nil {
		return nil, fmt.Errorf("parse catalog: %w", err)
	}
	read := opts.ReadFile
	if read == nil {
		read = os.ReadFile
	}
	files := map[string][]byte{} // a schema file shared by several models is read once
	models := make([]Model, 0, len(fc.Models))
	for i, fm := range fc.Models {
		m, err := fm.toModel(resolve, opts.Dir, read, files)
		if err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", entryName(fm.ID, i), err)
		}
		models = append(models, m)
	}
	return New(models, opts)
}

func (fm fileModel) toModel(resolve func(string) string, dir string,
	read func(string) ([]byte, error), files map[string][]byte) (Model, error) {
	m := Model{
		ID:          fm.ID,
		Adapter:     Adapter(fm.Adapter),
		Upstream:    fm.Upstream,
		Credential:  fm.Credential,
		Billing:     Billing{ChargesOnPolicyRejection: normalizeCharges(fm.Billing.ChargesOnPolicyRejection)},
		Entitlement: strings.TrimSpace(fm.Entitlement),
	}
	if resolve != nil && m.Credential != "" {
		// An unset {env.X} resolves to "": fail the load rather than send
		// partners an empty key and blame them for the 401.
		if m.Credential = resolve(m.Credential); strings.TrimSpace(m.Credential) == "" {
			return m, errors.New("credential resolved to an empty value (unset environment variable?)")
		}
	}
	if fm.CredentialHeader != nil {
		if strings.TrimSpace(fm.CredentialHeader.Name) == "" {
			return m, errors.New("credential_header.name is required when credential_header is set")
		}
		m.CredentialHeader = strings.TrimSpace(fm.CredentialHeader.Name)
		m.CredentialPrefix = strings.TrimSpace(fm.CredentialHeader.Prefix)
	} else {
		m.CredentialHeader, m.CredentialPrefix = defaultCredentialHeader(m.Adapter)
	}
	if fm.PriceCents != nil {
		m.PriceCents = *fm.PriceCents
	}
	var err error
	if m.Deadline, err = duration(fm.Deadline, DefaultDeadline, "deadline"); err != nil {
		return m, err
	}
	if m.PollInterval, err = duration(fm.PollInterval, DefaultPollInterval, "poll_interval"); err != nil {
		return m, err
	}
	if fm.Rehost != nil {
		if m.Rehost, err = fm.Rehost.Compile(); err != nil {
			return m, err
		}
	}
	raw := bytes.TrimSpace(fm.InputSchema)
	switch {
	case len(raw) == 0 || bytes.Equal(raw, []byte("null")):
	case raw[0] == '"':
		var p string
		if err := json.Unmarshal(raw, &p); err != nil {
			return m, fmt.Errorf("input_schema: %w", err)
		}
		if p == "" {
			return m, errors.New("input_schema: empty path")
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		b, ok := files[p]
		if !ok {
			if b, err = read(p); err != nil {
				return m, fmt.Errorf("input_schema: %w", err)
			}
			files[p] = b
		}
		m.SchemaBytes = b
	case raw[0] == '{':
		var buf bytes.Buffer
		if err := json.Compact(&buf, raw); err != nil {
			return m, fmt.Errorf("input_schema: %w", err)
		}
		m.SchemaBytes = buf.Bytes()
	default:
		return m, errors.New("input_schema must be a file path or an inline OpenAPI object")
	}
	return m, nil
}

func duration(s string, def time.Duration, field string) (time.Duration, error) {
	if s == "" {
		return def, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", field, err)
	}
	if d <= 0 {
		return 0, fmt.Errorf("%s must be positive, got %s", field, s)
	}
	return d, nil
}

func normalizeCharges(v string) string {
	switch v {
	case ChargesYes, ChargesNo, ChargesUnknown:
		return v
	}
	return ChargesUnknown
}

// defaultCredentialHeader is how each partner family expects its key.
func defaultCredentialHeader(a Adapter) (name, prefix string) {
	switch a {
	case AdapterFal:
		return "Authorization", "Key"
	case AdapterBFL:
		return "x-key", ""
	}
	return "Authorization", "Bearer"
}
