package httpx

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
)

// RangeStart returns the first byte http.ServeContent will read of a
// representation of size bytes for a GET with this Range header: the start
// of the first byte range that begins inside it, else 0. A remote blob
// store fetches from there before the response starts, so that a store
// that is down fails the request instead of cutting a 200 short. It
// decides nothing about the response; ServeContent still does, and seeks
// elsewhere when this guess is wrong (a malformed header, several ranges).
//
// It reads the header as ServeContent does: empty list elements are
// skipped, spaces and tabs around a range and its bounds are ignored, and a
// range starting at or past the end is passed over for the next one.
func RangeStart(header string, size int64) int64 {
	spec, ok := strings.CutPrefix(header, "bytes=")
	if !ok {
		return 0
	}
	for _, r := range strings.Split(spec, ",") {
		r = trimWhitespace(r)
		if r == "" {
			continue
		}
		startStr, endStr, ok := strings.Cut(r, "-")
		if !ok {
			return 0
		}
		startStr, endStr = trimWhitespace(startStr), trimWhitespace(endStr)
		if startStr == "" { // suffix: the last n bytes
			if strings.HasPrefix(endStr, "-") {
				return 0
			}
			n, err := strconv.ParseInt(endStr, 10, 64)
			if err != nil || n <= 0 {
				return 0 // invalid, or empty: nothing is read
			}
			return max(size-n, 0)
		}
		start, err := strconv.ParseInt(startStr, 10, 64)
		if err != nil || start < 0 {
			return 0
		}
		if start < size {
			return start
		}
	}
	return 0
}

// trimWhitespace drops the whitespace around s that ServeContent ignores.
func trimWhitespace(s string) string { return strings.Trim(s, " \t\r\n") }

// ServeContent is http.ServeContent (ranges, conditional requests, HEAD)
// whose refusals are errors for the route's envelope: 416 for a range
// outside the content, 412 for a failed precondition. http.ServeContent
// writes the first as plain text and the second with no body, under the
// content's own headers. A 416 keeps the Content-Range it set.
func ServeContent(w http.ResponseWriter, r *http.Request, modtime time.Time, content io.ReadSeeker) error {
	rc := &refusalCatcher{ResponseWriter: w}
	http.ServeContent(rc, r, "", modtime, content)
	switch rc.refused {
	case http.StatusRequestedRangeNotSatisfiable:
		return apierr.New(rc.refused, "range_not_satisfiable", "the requested range lies outside the content")
	case http.StatusPreconditionFailed:
		return apierr.New(rc.refused, "precondition_failed", "a precondition of the request does not hold")
	}
	return nil
}

// refusalCatcher holds back a 412 or 416 and what follows it.
type refusalCatcher struct {
	http.ResponseWriter
	refused int
}

func (c *refusalCatcher) WriteHeader(code int) {
	if code == http.StatusRequestedRangeNotSatisfiable || code == http.StatusPreconditionFailed {
		c.refused = code
		return
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *refusalCatcher) Write(p []byte) (int, error) {
	if c.refused != 0 {
		return len(p), nil
	}
	return c.ResponseWriter.Write(p)
}

// Unwrap lets http.ResponseController reach the connection.
func (c *refusalCatcher) Unwrap() http.ResponseWriter { return c.ResponseWriter }
