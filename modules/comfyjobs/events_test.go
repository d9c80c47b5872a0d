package comfyjobs

import (
	"encoding/json"
	"testing"
)

// TestSSEFrame: a payload that is one line of JSON already is framed as
// it is (a preview's megabytes are not copied through json.Marshal);
// anything else is marshalled, which compacts it onto one line.
func TestSSEFrame(t *testing.T) {
	cases := []struct {
		name string
		data any
		want string // "" = an error
	}{
		{"raw JSON", json.RawMessage(`{"data_base64":"AAAA"}`), "event: e\ndata: {\"data_base64\":\"AAAA\"}\n\n"},
		{"raw JSON on lines", json.RawMessage("{\n \"a\": 1\r\n}"), "event: e\ndata: {\"a\":1}\n\n"},
		{"no payload", json.RawMessage(nil), "event: e\ndata: null\n\n"},
		{"not JSON", json.RawMessage(`{"a":`), ""},
		{"a value", map[string]int{"a": 1}, "event: e\ndata: {\"a\":1}\n\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := sseFrame("e", tc.data)
			switch {
			case tc.want == "" && err == nil:
				t.Errorf("sseFrame = %q, want an error", b)
			case tc.want != "" && string(b) != tc.want:
				t.Errorf("sseFrame = %q, %v; want %q", b, err, tc.want)
			}
		})
	}
}
