package httpx

import (
	"strconv"
	"strings"
)

// RangeStart returns the first byte http.ServeContent will read of a
// representation of size bytes for a GET with this Range header: the start
// of its first byte range when that range is satisfiable, else 0. A remote
// blob store fetches from there before the response starts, so that a
// store that is down fails the request instead of cutting a 200 short.
// It decides nothing about the response; ServeContent still does.
func RangeStart(header string, size int64) int64 {
	spec, ok := strings.CutPrefix(header, "bytes=")
	if !ok {
		return 0
	}
	first, _, _ := strings.Cut(spec, ",")
	startStr, endStr, ok := strings.Cut(strings.TrimSpace(first), "-")
	if !ok {
		return 0
	}
	if startStr == "" { // suffix: the last n bytes
		n, err := strconv.ParseInt(endStr, 10, 64)
		if err != nil || n <= 0 {
			return 0
		}
		return max(size-n, 0)
	}
	start, err := strconv.ParseInt(startStr, 10, 64)
	if err != nil || start < 0 || start >= size {
		return 0
	}
	return start
}
