// Package catalog holds the router's model catalog: which partner models are
// runnable, how to reach and pay for each, which input schema guards it, and
// who may see it. It is loaded from a JSON file named in the Caddyfile (see
// file.go for the format), is immutable once built, and is rebuilt on every
// config reload. Paging cursors are HMAC-signed and bound to the catalog
// version and the caller's entitlements, so a forged, tampered or stale
// cursor is refused instead of being misread.
package catalog

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/router/rehost"
	"github.com/comfygate/comfygate/internal/router/schema"
)

// Adapter names the provider protocol used to run a model.
type Adapter string

// The adapters the router implements.
const (
	AdapterHTTP Adapter = "http" // synchronous passthrough
	AdapterFal  Adapter = "fal"  // fal queue: submit, status, result, cancel
	AdapterBFL  Adapter = "bfl"  // BFL: submit, then poll polling_url
)

// Values of Billing.ChargesOnPolicyRejection.
const (
	ChargesYes     = "yes"
	ChargesNo      = "no"
	ChargesUnknown = "unknown"
)

// Contract limits on identifiers.
const (
	MaxProviderLen = 64
	MaxModelLen    = 128
	MaxIDLen       = 193
)

// segmentPattern is the contract's RouterProviderSegment/RouterModelSegment pattern.
var segmentPattern = regexp.MustCompile(`^[a-z0-9]+([._-][a-z0-9]+)*$`)

// Billing is the per-model billing fact the catalog publishes.
type Billing struct {
	ChargesOnPolicyRejection string `json:"charges_on_policy_rejection"`
}

// Model is one runnable catalog entry. Treat it as read-only.
type Model struct {
	// ID is provider/model[/variant].
	ID string
	// Provider is the first id segment.
	Provider string
	// Name is the id after the provider ("model" or "model/variant"), so
	// that ID == Provider + "/" + Name always holds.
	Name string
	// Adapter selects the provider protocol.
	Adapter Adapter
	// Upstream is the partner base URL.
	Upstream string
	// Credential is the partner secret, already resolved. Never log it.
	Credential string
	// CredentialHeader and CredentialPrefix say how to send Credential:
	// header CredentialHeader with value "CredentialPrefix Credential"
	// (just Credential when the prefix is empty). See CredentialValue.
	CredentialHeader string
	CredentialPrefix string
	// SchemaBytes is the input schema document served byte-for-byte; nil
	// when no schema was authored.
	SchemaBytes []byte
	// ETag is the strong entity tag of SchemaBytes: quoted hex sha256.
	ETag string
	// Validator checks call bodies against SchemaBytes; nil without a schema.
	Validator *schema.Validator
	Billing   Billing
	// PriceCents is reserved against the workspace spend ceiling per call.
	PriceCents int64
	// Deadline is the router's own bound on one call.
	Deadline time.Duration
	// PollInterval paces handle polling (fal, bfl) and is the Retry-After of
	// a 504 with a held handle.
	PollInterval time.Duration
	// Entitlement is the group a caller needs to see the model; "" = everyone.
	Entitlement string
	// Rehost, when set, says which members of a successful answer hold
	// results to copy into the gateway's storage (see package rehost).
	Rehost *rehost.Rule
}

// CredentialValue is the header value carrying the partner credential.
func (m *Model) CredentialValue() string {
	if m.CredentialPrefix == "" {
		return m.Credential
	}
	return m.CredentialPrefix + " " + m.Credential
}

// ListEntry is the contract's RouterModelListEntry.
type ListEntry struct {
	ID       string  `json:"id"`
	Provider string  `json:"provider"`
	Model    string  `json:"model"`
	Billing  Billing `json:"billing"`
}

// Entry renders m as a catalog list item.
func (m *Model) Entry() ListEntry {
	return ListEntry{ID: m.ID, Provider: m.Provider, Model: m.Name, Billing: m.Billing}
}

// Catalog is an immutable, sorted set of models.
type Catalog struct {
	models  []*Model // sorted by ID
	byID    map[string]*Model
	version string
	key     []byte
}

// New validates models and builds a catalog. Each model's SchemaBytes (when
// set) is compiled; Provider, Name, ETag and Validator are derived and any
// values the caller put there are replaced.
func New(models []Model, opts Options) (*Catalog, error) {
	c := &Catalog{byID: make(map[string]*Model, len(models))}
	for i := range models {
		m := models[i] // copy: the catalog owns its models
		if err := prepare(&m, opts); err != nil {
			return nil, fmt.Errorf("catalog entry %s: %w", entryName(m.ID, i), err)
		}
		if _, dup := c.byID[m.ID]; dup {
			return nil, fmt.Errorf("catalog entry %q: duplicate id", m.ID)
		}
		c.byID[m.ID] = &m
		c.models = append(c.models, &m)
	}
	sort.Slice(c.models, func(i, j int) bool { return c.models[i].ID < c.models[j].ID })
	c.version = computeVersion(c.models)
	c.key = opts.CursorKey
	if len(c.key) == 0 {
		c.key = make([]byte, 32)
		if _, err := rand.Read(c.key); err != nil {
			return nil, fmt.Errorf("cursor key: %w", err)
		}
	}
	return c, nil
}

func entryName(id string, i int) string {
	if id == "" {
		return fmt.Sprintf("#%d", i)
	}
	return fmt.Sprintf("%q", id)
}

// ValidateID checks an id against the contract's segment rules and returns
// the provider and the rest (model[/variant]).
func ValidateID(id string) (provider, name string, err error) {
	if id == "" {
		return "", "", errors.New("id is required")
	}
	if len(id) > MaxIDLen {
		return "", "", fmt.Errorf("id is %d characters, over the limit of %d", len(id), MaxIDLen)
	}
	segs := strings.Split(id, "/")
	if len(segs) < 2 || len(segs) > 3 {
		return "", "", errors.New("id must be provider/model or provider/model/variant")
	}
	limits := []int{MaxProviderLen, MaxModelLen, MaxModelLen}
	names := []string{"provider", "model", "variant"}
	for i, s := range segs {
		if len(s) > limits[i] {
			return "", "", fmt.Errorf("%s segment %q is over %d characters", names[i], s, limits[i])
		}
		if !segmentPattern.MatchString(s) {
			return "", "", fmt.Errorf("%s segment %q must match %s", names[i], s, segmentPattern)
		}
	}
	if len(segs) == 3 && segs[2] == "openapi.json" {
		return "", "", errors.New(`variant "openapi.json" is reserved for the schema route`)
	}
	return segs[0], strings.Join(segs[1:], "/"), nil
}

func prepare(m *Model, opts Options) error {
	var err error
	if m.Provider, m.Name, err = ValidateID(m.ID); err != nil {
		return err
	}
	if strings.Contains(m.Name, "/") {
		// The list and the detail answer id as a RouterModelId and model
		// as a RouterModelSegment, neither of which has room for a variant.
		return errors.New("id must be provider/model: a listed model's id has no variant segment")
	}
	switch m.Adapter {
	case AdapterHTTP, AdapterFal, AdapterBFL:
	case "":
		return errors.New("adapter is required (http, fal or bfl)")
	default:
		return fmt.Errorf("adapter %q is not one of http, fal, bfl", m.Adapter)
	}
	u, err := url.Parse(m.Upstream)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return fmt.Errorf("upstream %q must be an absolute http(s) URL", m.Upstream)
	}
	if u.Scheme == "http" && !opts.AllowHTTPUpstream {
		return fmt.Errorf("upstream %q must use https", m.Upstream)
	}
	if m.PriceCents < 0 {
		return fmt.Errorf("price_cents must be >= 0, got %d", m.PriceCents)
	}
	if m.Deadline == 0 {
		m.Deadline = DefaultDeadline
	}
	if m.PollInterval == 0 {
		m.PollInterval = DefaultPollInterval
	}
	if m.Deadline < 0 || m.PollInterval < 0 {
		return errors.New("deadline and poll_interval must be positive")
	}
	if m.CredentialHeader == "" {
		m.CredentialHeader, m.CredentialPrefix = defaultCredentialHeader(m.Adapter)
	}
	m.Billing.ChargesOnPolicyRejection = normalizeCharges(m.Billing.ChargesOnPolicyRejection)
	if m.Rehost == nil {
		m.Rehost = opts.Rehost[m.Provider]
	}
	m.ETag, m.Validator = "", nil
	if m.SchemaBytes != nil {
		v, err := schema.Compile(m.SchemaBytes)
		if err != nil {
			return fmt.Errorf("input_schema: %w", err)
		}
		sum := sha256.Sum256(m.SchemaBytes)
		m.ETag = `"` + hex.EncodeToString(sum[:]) + `"`
		m.Validator = v
	}
	return nil
}

// computeVersion hashes everything a caller can observe or that changes how
// a call runs, except the credential (a rotated secret is not a new catalog,
// and a secret does not belong in a value that may be logged).
func computeVersion(models []*Model) string {
	type canon struct {
		ID, Adapter, Upstream, CredHeader, CredPrefix, ETag, Charges, Entitlement string
		Price                                                                     int64
		Deadline, Poll                                                            time.Duration
		Rehost                                                                    string `json:",omitempty"`
	}
	list := make([]canon, len(models))
	for i, m := range models {
		list[i] = canon{m.ID, string(m.Adapter), m.Upstream, m.CredentialHeader, m.CredentialPrefix,
			m.ETag, m.Billing.ChargesOnPolicyRejection, m.Entitlement, m.PriceCents, m.Deadline, m.PollInterval, m.Rehost.String()}
	}
	b, _ := json.Marshal(list) // plain strings and ints: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Version identifies the catalog's content; it changes whenever an entry is
// added, removed or altered.
func (c *Catalog) Version() string { return c.version }

// Len is the number of models.
func (c *Catalog) Len() int { return len(c.models) }

// Lookup finds a model by exact id, regardless of entitlements.
func (c *Catalog) Lookup(id string) (*Model, bool) {
	m, ok := c.byID[id]
	return m, ok
}

// Models returns the models sorted by id. The slice is shared: do not modify.
func (c *Catalog) Models() []*Model { return c.models }
