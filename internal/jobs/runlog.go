package jobs

import (
	"fmt"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/comfygate/comfygate/storage"
)

// RunLog collects what one attempt of a job printed, for jobs of
// serverless deployments. It keeps at most limit bytes: while the run
// prints more, it keeps the first half and the latest part (where the
// error and the timing line are) and notes how much it left out between
// them. It is safe for concurrent use; a nil *RunLog discards everything.
type RunLog struct {
	mu    sync.Mutex
	limit int
	// buf is the whole text while it fits, then its head.
	buf []byte
	// tail holds the latest bytes once over the limit; it may grow to
	// twice tailCap between trims.
	tail  []byte
	over  bool
	total int64
}

// runLogMarkerReserve is room kept for the "left out" marker.
const runLogMarkerReserve = 96

// NewRunLog returns an empty log that keeps at most limit bytes
// (storage.MaxJobLogBytes when limit <= runLogMarkerReserve*2).
func NewRunLog(limit int) *RunLog {
	if limit <= runLogMarkerReserve*2 {
		limit = storage.MaxJobLogBytes
	}
	return &RunLog{limit: limit}
}

func (l *RunLog) headCap() int { return l.limit / 2 }
func (l *RunLog) tailCap() int { return l.limit - l.headCap() - runLogMarkerReserve }

// Write appends p; it never fails.
func (l *RunLog) Write(p []byte) (int, error) {
	if l == nil {
		return len(p), nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total += int64(len(p))
	switch {
	case l.over:
		l.tail = append(l.tail, p...)
	case len(l.buf)+len(p) <= l.limit:
		l.buf = append(l.buf, p...)
		return len(p), nil
	default:
		l.over = true
		h := l.headCap()
		all := append(l.buf, p...)
		l.tail = append([]byte(nil), all[h:]...)
		l.buf = all[:h:h]
	}
	if len(l.tail) > 2*l.tailCap() {
		l.tail = append([]byte(nil), l.tail[len(l.tail)-l.tailCap():]...)
	}
	return len(p), nil
}

// Printf appends a formatted line (a newline is added when missing).
func (l *RunLog) Printf(format string, args ...any) {
	if l == nil {
		return
	}
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	_, _ = l.Write([]byte(s))
}

// JobLog returns the log as it stands, as stored: valid UTF-8 (invalid
// bytes become U+FFFD), without NUL bytes, at most limit bytes long.
func (l *RunLog) JobLog(capturedAt time.Time) storage.JobLog {
	l.mu.Lock()
	defer l.mu.Unlock()
	capturedAt = capturedAt.UTC().Truncate(time.Microsecond)
	if !l.over {
		text := sanitize(string(l.buf))
		if len(text) <= l.limit {
			return storage.JobLog{Text: text, CapturedAt: capturedAt}
		}
		return storage.JobLog{Text: cutRunes(text, l.limit), Truncated: true, CapturedAt: capturedAt}
	}
	tail := l.tail
	if len(tail) > l.tailCap() {
		tail = tail[len(tail)-l.tailCap():]
	}
	head := sanitize(string(trimPartialEnd(l.buf)))
	tailText := sanitize(string(trimPartialStart(tail)))
	left := l.total - int64(len(l.buf)) - int64(len(tail))
	marker := fmt.Sprintf("\n[… %d bytes of the run log left out …]\n", left)
	head = cutRunes(head, l.headCap())
	if room := l.limit - len(head) - len(marker); len(tailText) > room {
		tailText = lastRunes(tailText, room)
	}
	return storage.JobLog{Text: head + marker + tailText, Truncated: true, CapturedAt: capturedAt}
}

// sanitize makes s storable everywhere: valid UTF-8, no NUL bytes.
func sanitize(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "")
}

// trimPartialEnd drops a rune cut off at the end of b.
func trimPartialEnd(b []byte) []byte {
	for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
		r := b[len(b)-i]
		if utf8.RuneStart(r) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// trimPartialStart drops the continuation bytes of a rune cut off at the
// start of b.
func trimPartialStart(b []byte) []byte {
	for i := 0; i < utf8.UTFMax && i < len(b); i++ {
		if utf8.RuneStart(b[i]) {
			return b[i:]
		}
	}
	return b
}

// cutRunes returns the longest prefix of s of at most n bytes that ends on
// a rune boundary.
func cutRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// lastRunes returns the longest suffix of s of at most n bytes that starts
// on a rune boundary.
func lastRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := len(s) - n
	for i < len(s) && !utf8.RuneStart(s[i]) {
		i++
	}
	return s[i:]
}
