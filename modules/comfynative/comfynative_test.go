package comfynative

import "testing"

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
