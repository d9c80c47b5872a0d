package workflow

import (
	"net/http"

	"github.com/comfygate/comfygate/internal/apierr"
)

// Limits bound what a submission may cost before it is decoded. Every
// field's zero value means "use the default", so callers set only what they
// change.
type Limits struct {
	// MaxBodyBytes caps the whole request body (413 payload_too_large).
	MaxBodyBytes int64
	// MaxNodes caps the members of the workflow object.
	MaxNodes int
	// MaxDepth caps container nesting; the body's own object is depth 1.
	MaxDepth int
	// MaxStringBytes caps one string (key or value), measured on its
	// encoded bytes, which are never fewer than its decoded bytes.
	MaxStringBytes int
	// MaxArrayLen caps the elements of any array and the members of any
	// object other than the workflow object itself.
	MaxArrayLen int
}

// DefaultLimits are generous for hand-built and UI-exported workflows.
func DefaultLimits() Limits {
	return Limits{
		MaxBodyBytes:   8 << 20,
		MaxNodes:       5000,
		MaxDepth:       64,
		MaxStringBytes: 1 << 20,
		MaxArrayLen:    10000,
	}
}

// maxNumberBytes caps one number literal. It is not configurable: no widget
// needs more, and it keeps exact numeric comparisons cheap.
const maxNumberBytes = 256

func (l Limits) withDefaults() Limits {
	d := DefaultLimits()
	if l.MaxBodyBytes <= 0 {
		l.MaxBodyBytes = d.MaxBodyBytes
	}
	if l.MaxNodes <= 0 {
		l.MaxNodes = d.MaxNodes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = d.MaxDepth
	}
	if l.MaxStringBytes <= 0 {
		l.MaxStringBytes = d.MaxStringBytes
	}
	if l.MaxArrayLen <= 0 {
		l.MaxArrayLen = d.MaxArrayLen
	}
	return l
}

// limitError is the 422 for a cap other than the body size. It names the
// limit and its value so that a client can tell what to shrink.
func limitError(limit string, max int) *apierr.Error {
	return apierr.New(http.StatusUnprocessableEntity, "invalid_workflow",
		"the workflow exceeds the "+limit+" limit").
		WithDetails(map[string]any{"limit": limit, "max": max})
}
