package httpx

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr/apierrtest"
)

// firstRead records the offset of the first Read on a seekable body.
type firstRead struct {
	*bytes.Reader
	at   int64
	read bool
}

func (f *firstRead) Read(p []byte) (int, error) {
	if !f.read {
		f.read = true
		f.at, _ = f.Seek(0, io.SeekCurrent)
	}
	return f.Reader.Read(p)
}

// FuzzRangeStart holds RangeStart to its promise: within the
// representation, and the offset http.ServeContent then reads first
// whenever it answers one byte range.
func FuzzRangeStart(f *testing.F) {
	for _, s := range []string{"", "bytes=10-19", "bytes=-30", "bytes=-300", "bytes=99-", "bytes=100-",
		"bytes=5-9, 20-29", "bytes= 7-8", "bytes=x-2", "bytes=-0", "bytes=3", "bytes=-9223372036854775808",
		"bytes=9223372036854775807-", "bytes=-9223372036854775807", "bytes=1-0", "bytes=+5-"} {
		f.Add(s, int64(100))
	}
	f.Add("bytes=0-", int64(0))
	f.Fuzz(func(t *testing.T, header string, size int64) {
		size = max(size, 0) % (1 << 16) // ServeContent needs the bytes behind it
		got := RangeStart(header, size)
		if got < 0 || (got > 0 && got >= size) {
			t.Fatalf("RangeStart(%q, %d) = %d, outside the representation", header, size, got)
		}
		body := &firstRead{Reader: bytes.NewReader(make([]byte, size))}
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.Header.Set("Range", header)
		rec := httptest.NewRecorder()
		rec.Header().Set("Content-Type", "application/octet-stream") // no sniffing read
		http.ServeContent(rec, req, "", time.Time{}, body)
		if rec.Code == http.StatusPartialContent && body.read &&
			!strings.HasPrefix(rec.Header().Get("Content-Type"), "multipart/byteranges") && body.at != got {
			t.Fatalf("RangeStart(%q, %d) = %d; ServeContent read from %d", header, size, got, body.at)
		}
	})
}

// FuzzDecodeJSON checks that DecodeJSON takes exactly one bounded JSON
// object and refuses anything else in the envelope.
func FuzzDecodeJSON(f *testing.F) {
	for _, s := range []string{`{}`, `{"a":1}`, ` {"a":1} `, `{"a":1}{}`, `[]`, `null`, `{"a":`, `{"unknown":1}`,
		strings.Repeat(`{"a":`, 200), "\ufeff{}", `{"a":1} x`} {
		f.Add([]byte(s), false)
	}
	const limit = 1 << 10
	f.Fuzz(func(t *testing.T, body []byte, strict bool) {
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		var v struct {
			A json.RawMessage `json:"a"`
		}
		err := DecodeJSON(req, limit, &v, strict)
		if err != nil {
			e := apierrtest.ClientError(t, body, err)
			if len(body) > limit && e.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("a %d-byte body over the %d limit answered %d", len(body), limit, e.Status)
			}
			return
		}
		if len(body) > limit {
			t.Fatalf("a %d-byte body over the %d limit was accepted", len(body), limit)
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(body, &m) != nil || m == nil {
			t.Fatalf("DecodeJSON accepted %q, which is not one JSON object", body)
		}
		if _, ok := m["a"]; strict && len(m) > 1 || strict && len(m) == 1 && !ok {
			t.Fatalf("strict DecodeJSON accepted unknown members in %q", body)
		}
	})
}

// TestDecodeJSONStrictIsCaseExact: FuzzDecodeJSON found that strict mode
// took {"A":0} as "a": encoding/json folds case, so a member the contract
// does not name passed, and a second spelling overwrote the first.
func TestDecodeJSONStrictIsCaseExact(t *testing.T) {
	type in struct {
		A    int `json:"a"`
		Skip int `json:"-"`
	}
	for _, body := range []string{`{"A":0}`, `{"a":1,"A":2}`, `{"Skip":1}`, `{"-":1}`} {
		var v in
		err := DecodeJSON(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body)), 1<<10, &v, true)
		if err == nil {
			t.Errorf("strict DecodeJSON accepted %s", body)
			continue
		}
		apierrtest.ClientError(t, body, err)
	}
	var v in
	if err := DecodeJSON(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"a":3}`)), 1<<10, &v, true); err != nil || v.A != 3 {
		t.Fatalf("DecodeJSON(a:3) = %+v, %v", v, err)
	}
	if err := DecodeJSON(httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"A":3}`)), 1<<10, &v, false); err != nil {
		t.Fatalf("lenient DecodeJSON refused A: %v", err)
	}
}
