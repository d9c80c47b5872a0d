package comfynative

import (
	"net/http/httptest"
	"testing"
)

// TestKnown: the paths comfy_native answers; everything else passes on.
func TestKnown(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"/prompt", true}, {"/queue", true}, {"/interrupt", true}, {"/view", true}, {"/ws", true},
		{"/history", true}, {"/history/abc", true}, {"/object_info", true}, {"/object_info/KSampler", true},
		{"/upload/image", true}, {"/upload/mask", true}, {"/system_stats", true}, {"/features", true},
		{"/embeddings", true}, {"/extensions", true}, {"/models", true}, {"/models/checkpoints", true},
		{"/upload/other", false}, {"/history/a/b", false}, {"/prompt/x", false}, {"/free", false},
		{"/internal/logs/subscribe", false}, {"/api/v2/jobs", false}, {"/", false},
	}
	for _, tc := range tests {
		first, rest := split(tc.path)
		if got := known(first, rest); got != tc.want {
			t.Errorf("known(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

func split(p string) (string, string) {
	p = p[1:]
	for i := range len(p) {
		if p[i] == '/' {
			return p[:i], p[i+1:]
		}
	}
	return p, ""
}

// TestForeignOrigin: ComfyUI's guard for a loopback server — a browser
// page of another host may not call it; other servers are not guarded.
func TestForeignOrigin(t *testing.T) {
	tests := []struct {
		host, origin string
		want         bool
	}{
		{"127.0.0.1:8189", "", false},
		{"127.0.0.1:8189", "http://127.0.0.1:8189", false},
		{"localhost:8189", "http://localhost:3000", false}, // same host name, another port
		{"127.0.0.1:8189", "https://evil.example", true},
		{"localhost:8189", "http://evil.example:8189", true},
		{"[::1]:8189", "http://evil.example", true},
		{"127.0.0.1:8189", "::not a url", true},
		{"api.example.com", "https://app.example.com", false}, // not loopback: auth guards it
	}
	for _, tc := range tests {
		r := httptest.NewRequest("GET", "/prompt", nil)
		r.Host = tc.host
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := foreignOrigin(r); got != tc.want {
			t.Errorf("host %s origin %q: %v, want %v", tc.host, tc.origin, got, tc.want)
		}
	}
}
