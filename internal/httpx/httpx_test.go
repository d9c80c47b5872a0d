package httpx

import (
	"crypto/tls"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/internal/apierr"
)

func TestRoute(t *testing.T) {
	tests := []struct {
		path, prefix, rest string
		ok                 bool
	}{
		{"/api/v2/jobs", "", "jobs", true},
		{"/api/v2/jobs/abc/cancel", "", "jobs/abc/cancel", true},
		{"/api/v2/", "", "", true},
		{"/deployment/abc/api/v2/jobs", "/deployment/abc", "jobs", true},
		{"/deployment/my-dep-1/api/v2/assets/x/content", "/deployment/my-dep-1", "assets/x/content", true},
		{"/api/v2", "", "", false},
		{"/api/v1/jobs", "", "", false},
		{"/v1/models", "", "", false},
		{"/", "", "", false},
		{"", "", "", false},
	}
	for _, tt := range tests {
		prefix, rest, ok := Route(tt.path)
		if prefix != tt.prefix || rest != tt.rest || ok != tt.ok {
			t.Errorf("Route(%q) = %q, %q, %v; want %q, %q, %v", tt.path, prefix, rest, ok, tt.prefix, tt.rest, tt.ok)
		}
	}
}

func TestLinksFor(t *testing.T) {
	tests := []struct {
		name   string
		target string
		host   string
		tls    bool
		want   string
	}{
		{"http root mount", "/api/v2/jobs", "localhost:8188", false, "http://localhost:8188/api/v2/jobs/1"},
		{"https", "/api/v2/jobs", "api.example.com", true, "https://api.example.com/api/v2/jobs/1"},
		{"deployment prefix", "/deployment/abc/api/v2/jobs", "gw.example.com", true,
			"https://gw.example.com/deployment/abc/api/v2/jobs/1"},
		{"subdomain deployment", "/api/v2/jobs/xyz", "dep-1.example.com", true, "https://dep-1.example.com/api/v2/jobs/1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", tt.target, nil)
			r.Host = tt.host
			r.TLS = nil
			if tt.tls {
				r.TLS = &tls.ConnectionState{}
			}
			if got := LinksFor(r).URL("/jobs/1"); got != tt.want {
				t.Fatalf("URL = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLinksForStrippedMount: a handler that stripped the mount prefix
// (comfy_deployment) records it, and links keep it exactly once.
func TestLinksForStrippedMount(t *testing.T) {
	r := httptest.NewRequest("GET", "/api/v2/jobs/x", nil)
	r.Host = "gw.example.com"
	r = r.WithContext(WithMount(r.Context(), "/deployment/dep-1"))
	if got, want := LinksFor(r).URL("/jobs/1"), "http://gw.example.com/deployment/dep-1/api/v2/jobs/1"; got != want {
		t.Fatalf("URL = %q, want %q", got, want)
	}
	r = r.WithContext(WithMount(r.Context(), ""))
	if got, want := LinksFor(r).URL("/jobs/1"), "http://gw.example.com/api/v2/jobs/1"; got != want {
		t.Fatalf("host-addressed URL = %q, want %q", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	rec := httptest.NewRecorder()
	if err := WriteJSON(rec, http.StatusCreated, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	if rec.Code != 201 || rec.Header().Get("Content-Type") != "application/json" || rec.Header().Get("Cache-Control") != "no-store" {
		t.Fatalf("WriteJSON: %d %v", rec.Code, rec.Header())
	}
	if strings.TrimSpace(rec.Body.String()) != `{"a":1}` {
		t.Fatalf("body %q", rec.Body)
	}
}

type fromHash struct {
	Hash     string  `json:"hash"`
	FilePath *string `json:"file_path"`
}

func TestDecodeJSON(t *testing.T) {
	tests := []struct {
		name   string
		body   string
		limit  int64
		strict bool
		ok     bool
		hash   string
		status int // of a refusal; 400 unless set
	}{
		{"valid", `{"hash":"blake3:aa"}`, 1024, true, true, "blake3:aa", 0},
		{"valid with whitespace", " \n{\"hash\":\"h\"}\n ", 1024, true, true, "h", 0},
		{"unknown member strict", `{"hash":"h","extra":1}`, 1024, true, false, "", 0},
		{"unknown member lax", `{"hash":"h","extra":1}`, 1024, false, true, "h", 0},
		{"trailing object", `{"hash":"h"}{"hash":"i"}`, 1024, true, false, "", 0},
		{"trailing garbage", `{"hash":"h"} x`, 1024, true, false, "", 0},
		{"trailing number", `{"hash":"h"} 1`, 1024, true, false, "", 0},
		{"not json", `hash=h`, 1024, true, false, "", 0},
		{"empty", ``, 1024, true, false, "", 0},
		{"wrong type", `{"hash":1}`, 1024, true, false, "", 0},
		{"array", `[1]`, 1024, true, false, "", 0},
		{"oversize", `{"hash":"` + strings.Repeat("a", 200) + `"}`, 64, true, false, "", 413},
		{"one byte over the limit", `{"hash":"abcd"}`, int64(len(`{"hash":"abcd"}`)) - 1, true, false, "", 413},
		{"exactly at limit", `{"hash":"abcd"}`, int64(len(`{"hash":"abcd"}`)), true, true, "abcd", 0},
		{"trailing brace", `{"hash":"h"}}`, 1024, true, false, "", 0},
		{"trailing bracket", `{"hash":"h"}]`, 1024, true, false, "", 0},
		{"null", `null`, 1024, true, false, "", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/api/v2/assets/from-hash", strings.NewReader(tt.body))
			var v fromHash
			err := DecodeJSON(r, tt.limit, &v, tt.strict)
			if tt.ok {
				if err != nil {
					t.Fatalf("DecodeJSON: %v", err)
				}
				if v.Hash != tt.hash {
					t.Fatalf("hash = %q, want %q", v.Hash, tt.hash)
				}
				return
			}
			want, code := 400, "invalid_request"
			if tt.status == 413 {
				want, code = 413, "payload_too_large"
			}
			e, ok := apierr.As(err)
			if !ok || e.Status != want || e.Code != code {
				t.Fatalf("DecodeJSON = %v, want %d %s", err, want, code)
			}
		})
	}
}

func TestTime(t *testing.T) {
	loc := time.FixedZone("X", 5*3600+30*60)
	ts := time.Date(2025, 3, 4, 10, 20, 30, 123456000, loc)
	got := Time(ts)
	if got != "2025-03-04T04:50:30.123456Z" {
		t.Fatalf("Time = %q", got)
	}
	parsed, err := time.Parse(time.RFC3339, got)
	if err != nil || !parsed.Equal(ts) {
		t.Fatalf("Time output %q does not round-trip: %v", got, err)
	}
	if whole := Time(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)); whole != "2025-01-01T00:00:00Z" {
		t.Fatalf("Time(whole second) = %q", whole)
	}
	if TimePtr(nil) != nil {
		t.Fatal("TimePtr(nil) is not nil")
	}
	p := TimePtr(&ts)
	if p == nil || *p != got {
		t.Fatalf("TimePtr = %v", p)
	}
	b, _ := json.Marshal(struct {
		A *string `json:"a"`
	}{TimePtr(nil)})
	if string(b) != `{"a":null}` {
		t.Fatalf("nil TimePtr marshals as %s", b)
	}
}

func TestMethodNotAllowed(t *testing.T) {
	e, ok := apierr.As(MethodNotAllowed("GET", "POST"))
	if !ok || e.Status != 405 || e.Code != "method_not_allowed" || e.Header.Get("Allow") != "GET, POST" {
		t.Fatalf("MethodNotAllowed = %+v", e)
	}
}

func TestRangeStart(t *testing.T) {
	tests := []struct {
		header string
		size   int64
		want   int64
	}{
		{"", 100, 0},
		{"bytes=10-19", 100, 10},
		{"bytes=10-", 100, 10},
		{"bytes=-30", 100, 70},
		{"bytes=-300", 100, 0},
		{"bytes=99-", 100, 99},
		{"bytes=100-", 100, 0}, // unsatisfiable: ServeContent answers 416 without reading
		{"bytes=5-9, 20-29", 100, 5},
		{"bytes= 7-8", 100, 7},
		{"items=1-2", 100, 0},
		{"bytes=x-2", 100, 0},
		{"bytes=-0", 100, 0},
		{"bytes=3", 100, 0},
		// Found by FuzzRangeStart: ServeContent skips empty list elements,
		// trims around the bounds and passes over a range past the end.
		{"bytes=,010-", 163, 10},
		{"bytes=1\r-", 100, 1},
		{"bytes=5 -9", 100, 5},
		{"bytes=200-, 7-", 100, 7},
		{"bytes=--5", 100, 0},
	}
	for _, tt := range tests {
		if got := RangeStart(tt.header, tt.size); got != tt.want {
			t.Errorf("RangeStart(%q, %d) = %d, want %d", tt.header, tt.size, got, tt.want)
		}
	}
}

func TestCanonicalID(t *testing.T) {
	for in, want := range map[string]string{
		"01A23ECC-5EC9-769E-BC86-49BE79478EA8": "01a23ecc-5ec9-769e-bc86-49be79478ea8",
		"01a23ecc-5ec9-769e-bc86-49be79478ea8": "01a23ecc-5ec9-769e-bc86-49be79478ea8",
		"from-hash":                            "from-hash",
		"01A23ECC-5EC9-769E-BC86-49BE79478EAZ": "01A23ECC-5EC9-769E-BC86-49BE79478EAZ",
		"01A23ECC05EC9-769E-BC86-49BE79478EA8": "01A23ECC05EC9-769E-BC86-49BE79478EA8",
		"":                                     "",
	} {
		if got := CanonicalID(in); got != want {
			t.Errorf("CanonicalID(%q) = %q, want %q", in, got, want)
		}
	}
}
