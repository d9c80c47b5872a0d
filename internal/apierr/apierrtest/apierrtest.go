// Package apierrtest holds the assertions that the fuzz targets share: a
// parser of hostile input refuses it with the contract's envelope and a
// client-error status, never with an untyped error or a 5xx.
package apierrtest

import (
	"testing"

	"github.com/comfygate/comfygate/internal/apierr"
)

// ClientError fails t unless err is an *apierr.Error (possibly wrapped)
// with a 4xx status and a code, which is what the envelope needs to answer
// the client rather than log a server fault.
func ClientError(t testing.TB, input any, err error) *apierr.Error {
	t.Helper()
	e, ok := apierr.As(err)
	if !ok {
		t.Fatalf("input %q: error %v (%T) is not an *apierr.Error", input, err, err)
	}
	if e.Status < 400 || e.Status > 499 || e.Code == "" {
		t.Fatalf("input %q: error %v has status %d code %q; want a 4xx with a code", input, err, e.Status, e.Code)
	}
	return e
}
