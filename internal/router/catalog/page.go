package catalog

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
)

// Paging limits from the contract.
const (
	DefaultLimit   = 20
	MaxLimit       = 100
	MaxCursorLen   = 512
	cursorFormatV1 = 1
	versionTagLen  = 8
	macLen         = sha256.Size
)

// ErrBadCursor is a cursor that is malformed, forged, tampered with, or from
// another catalog version or entitlement set. The handler answers 400
// invalid_input; the wrapped reason is for logs only.
var ErrBadCursor = errors.New("invalid or expired cursor")

var cursorPattern = regexp.MustCompile(`^[A-Za-z0-9._~+/=-]+$`)

// Audience is the set of entitlements a caller holds, normalised (sorted,
// deduplicated) so it can be bound into cursors. Build it with Visible.
type Audience struct {
	groups map[string]struct{}
	hash   [sha256.Size]byte
}

// Visible returns the audience for a caller's entitlements. A model with no
// entitlement group is visible to every audience.
func (c *Catalog) Visible(entitlements []string) Audience {
	return NewAudience(entitlements)
}

// NewAudience normalises entitlements into an Audience.
func NewAudience(entitlements []string) Audience {
	a := Audience{groups: make(map[string]struct{}, len(entitlements))}
	list := make([]string, 0, len(entitlements))
	for _, e := range entitlements {
		if _, dup := a.groups[e]; dup || e == "" {
			continue
		}
		a.groups[e] = struct{}{}
		list = append(list, e)
	}
	sort.Strings(list)
	// Each entitlement is length-prefixed: joined with a separator,
	// ["a\x00b"] and ["a", "b"] would hash alike and share cursors.
	h := sha256.New()
	for _, e := range list {
		h.Write(binary.AppendUvarint(nil, uint64(len(e))))
		h.Write([]byte(e))
	}
	h.Sum(a.hash[:0])
	return a
}

// Sees reports whether a caller with this audience may see and call m.
func (a Audience) Sees(m *Model) bool {
	if m.Entitlement == "" {
		return true
	}
	_, ok := a.groups[m.Entitlement]
	return ok
}

// Allows is Sees for a caller's raw entitlements, without building an
// Audience (which hashes them for cursors): the check a single call needs.
func Allows(entitlements []string, m *Model) bool {
	return m.Entitlement == "" || slices.Contains(entitlements, m.Entitlement)
}

// Page is one page of the catalog as the contract's RouterModelListResponse
// needs it.
type Page struct {
	Models     []*Model
	HasMore    bool
	NextCursor string // empty when !HasMore
	Limit      int    // the page size actually served
}

// ClampLimit applies the contract's limit rules: ≤0 → default, >max → max.
func ClampLimit(limit int) int {
	switch {
	case limit <= 0:
		return DefaultLimit
	case limit > MaxLimit:
		return MaxLimit
	}
	return limit
}

// Page returns the models aud sees, sorted by id, starting after the
// position cursor encodes ("" for the first page). has_more is exact: it is
// true only when another visible model follows the page.
func (c *Catalog) Page(aud Audience, cursor string, limit int) (Page, error) {
	limit = ClampLimit(limit)
	start := 0
	if cursor != "" {
		after, err := c.openCursor(aud, cursor)
		if err != nil {
			return Page{}, err
		}
		start = sort.Search(len(c.models), func(i int) bool { return c.models[i].ID > after })
	}
	p := Page{Limit: limit, Models: make([]*Model, 0, min(limit, len(c.models)-start))}
	i := start
	for ; i < len(c.models) && len(p.Models) < limit; i++ {
		if aud.Sees(c.models[i]) {
			p.Models = append(p.Models, c.models[i])
		}
	}
	for ; i < len(c.models); i++ {
		if aud.Sees(c.models[i]) {
			p.HasMore = true
			break
		}
	}
	if p.HasMore {
		p.NextCursor = c.sealCursor(aud, p.Models[len(p.Models)-1].ID)
	}
	return p, nil
}

// Cursor layout (before base64url without padding):
//
//	byte 0        format (1)
//	bytes 1..8    first 8 bytes of the catalog version (to tell stale from forged in logs)
//	bytes 9..n-33 last id served
//	last 32       HMAC-SHA256(key, format | full version | audience hash | last id)
//
// The MAC covers the full version and the audience, so a cursor from another
// catalog or another entitlement set fails verification even if it was
// genuinely issued. Ids are ≤193 bytes, so a cursor is ≤312 characters.
func (c *Catalog) sealCursor(aud Audience, lastID string) string {
	ver, _ := hex.DecodeString(c.version)
	buf := make([]byte, 0, 1+versionTagLen+len(lastID)+macLen)
	buf = append(buf, cursorFormatV1)
	buf = append(buf, ver[:versionTagLen]...)
	buf = append(buf, lastID...)
	buf = append(buf, c.mac(aud, lastID)...)
	return base64.RawURLEncoding.EncodeToString(buf)
}

func (c *Catalog) mac(aud Audience, lastID string) []byte {
	h := hmac.New(sha256.New, c.key)
	h.Write([]byte{cursorFormatV1})
	h.Write([]byte(c.version))
	h.Write(aud.hash[:])
	h.Write([]byte(lastID))
	return h.Sum(nil)
}

func (c *Catalog) openCursor(aud Audience, cursor string) (string, error) {
	if len(cursor) > MaxCursorLen || !cursorPattern.MatchString(cursor) {
		return "", fmt.Errorf("%w: not a cursor", ErrBadCursor)
	}
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return "", fmt.Errorf("%w: not base64url", ErrBadCursor)
	}
	if len(raw) < 1+versionTagLen+1+macLen || raw[0] != cursorFormatV1 {
		return "", fmt.Errorf("%w: wrong length or format", ErrBadCursor)
	}
	tag := raw[1 : 1+versionTagLen]
	lastID := string(raw[1+versionTagLen : len(raw)-macLen])
	sum := raw[len(raw)-macLen:]
	if !hmac.Equal(sum, c.mac(aud, lastID)) {
		ver, _ := hex.DecodeString(c.version)
		if !hmac.Equal(tag, ver[:versionTagLen]) {
			return "", fmt.Errorf("%w: issued for another catalog version", ErrBadCursor)
		}
		return "", fmt.Errorf("%w: signature mismatch (forged, tampered, or another entitlement set)", ErrBadCursor)
	}
	return lastID, nil
}
