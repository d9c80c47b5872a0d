// Package apierr defines the typed errors that every comfygate layer returns
// and the error_envelope module renders. An *Error carries the HTTP status, the
// contract's error code and a message that is safe to show a client; the cause
// (which may hold internal detail) is kept for logs only.
//
// The package imports nothing from Caddy so that domain packages can use it.
package apierr

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
)

// Error is an error the contract names. Handlers and domain packages return
// it (possibly wrapped with %w); the envelope finds it with errors.As.
type Error struct {
	// Status is the HTTP status of the response.
	Status int
	// Code is the contract's error code (v2 `error.code`, or the router bucket).
	Code string
	// Message is safe to show to the client.
	Message string
	// Details is the free-form `error.details` object; nil renders as null.
	Details map[string]any
	// RetryAfter, when positive, is sent as a Retry-After header in seconds.
	RetryAfter int
	// Header holds extra response headers (for example X-Committed-Spend-*).
	Header http.Header
	// Cause is the underlying error, logged but never sent.
	Cause error
}

func (e *Error) Error() string {
	if e.Cause != nil {
		return fmt.Sprintf("%s (%d): %s: %v", e.Code, e.Status, e.Message, e.Cause)
	}
	return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Message)
}

// Unwrap exposes the cause to errors.Is / errors.As.
func (e *Error) Unwrap() error { return e.Cause }

// WithDetails returns a copy of e carrying details.
func (e *Error) WithDetails(d map[string]any) *Error {
	c := *e
	c.Details = d
	return &c
}

// WithRetryAfter returns a copy of e with a Retry-After in seconds.
func (e *Error) WithRetryAfter(seconds int) *Error {
	c := *e
	c.RetryAfter = seconds
	return &c
}

// WithCause returns a copy of e wrapping cause.
func (e *Error) WithCause(cause error) *Error {
	c := *e
	c.Cause = cause
	return &c
}

// SetHeaders writes e's Retry-After and extra headers onto h.
func (e *Error) SetHeaders(h http.Header) {
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	for k, vs := range e.Header {
		for _, v := range vs {
			h.Add(k, v)
		}
	}
}

// New builds an *Error.
func New(status int, code, message string) *Error {
	return &Error{Status: status, Code: code, Message: message}
}

// As returns the *Error inside err, if there is one.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// The v2 contract's codes. Constructors return a fresh value so callers may
// decorate it without touching shared state.

// InvalidRequest is a body that cannot be read as the operation's input.
func InvalidRequest(msg string) *Error { return New(http.StatusBadRequest, "invalid_request", msg) }

// InvalidWorkflow is a workflow that failed validation.
func InvalidWorkflow(msg string) *Error {
	return New(http.StatusUnprocessableEntity, "invalid_workflow", msg)
}

// Validation is any other input validation failure on a v2 route (422).
func Validation(msg string) *Error {
	return New(http.StatusUnprocessableEntity, "invalid_request", msg)
}

// NotFound is a missing resource, or one the caller may not see.
func NotFound(msg string) *Error { return New(http.StatusNotFound, "not_found", msg) }

// BlobNotFound is a hash the caller may not mint from.
func BlobNotFound() *Error {
	return New(http.StatusNotFound, "blob_not_found", "no blob with that hash is available to you")
}

// HashMismatch is an expected_hash that differs from the computed one.
func HashMismatch(expected, got string) *Error {
	return New(http.StatusConflict, "hash_mismatch", "expected_hash does not match the uploaded bytes").
		WithDetails(map[string]any{"expected_hash": expected, "computed_hash": got}).
		WithRetryAfter(1)
}

// IdempotencyKeyReuse is a key that was already presented.
func IdempotencyKeyReuse() *Error {
	return New(http.StatusUnprocessableEntity, "idempotency_key_reuse",
		"this Idempotency-Key was already used; poll or list instead of resubmitting")
}

// AssetInUse is a delete refused because the platform still depends on the asset.
func AssetInUse() *Error {
	return New(http.StatusConflict, "asset_in_use", "the asset cannot be deleted while it is in use")
}

// PayloadTooLarge is a body over the configured limit.
func PayloadTooLarge(limit int64) *Error {
	return New(http.StatusRequestEntityTooLarge, "payload_too_large",
		fmt.Sprintf("the request body exceeds the limit of %d bytes", limit))
}

// Unauthorized is a missing or invalid credential.
func Unauthorized() *Error {
	return New(http.StatusUnauthorized, "unauthorized", "missing or invalid credentials")
}

// Forbidden is an authenticated caller that may not do this.
func Forbidden() *Error {
	return New(http.StatusForbidden, "forbidden", "you are not allowed to do this")
}

// Upstream is the generic 500; the cause is logged, never shown.
func Upstream(cause error) *Error {
	return &Error{Status: http.StatusInternalServerError, Code: "upstream_error",
		Message: "an unexpected error occurred; please retry later", Cause: cause}
}
