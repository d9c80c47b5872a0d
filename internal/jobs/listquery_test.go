package jobs

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage"
)

func TestCursorRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		c    storage.JobCursor
	}{
		{"utc whole second", storage.JobCursor{CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), ID: "0b9f6d1e-8a7c-4e2b-9f30-5c1d2e3f4a5b"}},
		{"microseconds", storage.JobCursor{CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: "a"}},
		{"nanoseconds", storage.JobCursor{CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 1, time.UTC), ID: "b"}},
		{"other zone", storage.JobCursor{CreatedAt: time.Date(2025, 6, 1, 23, 0, 0, 0, time.FixedZone("X", -7*3600)), ID: "c"}},
		{"id with separator", storage.JobCursor{CreatedAt: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC), ID: "x|y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := EncodeCursor(tt.c)
			if strings.ContainsAny(s, "+/=&?# ") {
				t.Fatalf("cursor %q is not URL-safe", s)
			}
			got, err := decodeCursor(s)
			if err != nil {
				t.Fatalf("decodeCursor(%q): %v", s, err)
			}
			if !got.CreatedAt.Equal(tt.c.CreatedAt) || got.ID != tt.c.ID {
				t.Fatalf("round trip = %+v, want %+v", got, tt.c)
			}
		})
	}
}

func TestDecodeCursorMalformed(t *testing.T) {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	for name, s := range map[string]string{
		"empty":             "",
		"not base64":        "!!!not-base64!!!",
		"padded base64":     base64.URLEncoding.EncodeToString([]byte("2025-01-01T00:00:00Z|a")),
		"std alphabet":      strings.ReplaceAll(strings.ReplaceAll(enc("2025-01-01T00:00:00.000001Z|???>>>"), "-", "+"), "_", "/"),
		"no separator":      enc("2025-01-01T00:00:00Z"),
		"bad time":          enc("yesterday|a"),
		"time without zone": enc("2025-01-01T00:00:00|a"),
		"separator only":    enc("|"),
	} {
		if c, err := decodeCursor(s); err == nil {
			t.Errorf("%s: decodeCursor(%q) = %+v, want an error", name, s, c)
		}
	}
}
