package comfygate

import (
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/comfygate/comfygate/internal/jobs"
)

// The reaper block: defaults, what parses, and what is refused.
func TestReaperOptions(t *testing.T) {
	tests := []struct {
		name      string
		block     string
		wantErr   string
		wantBatch int
		wantPause time.Duration
	}{
		{"defaults", ``, "", jobs.DefaultReapBatch, jobs.DefaultReapPause},
		{"set", "reaper {\nbatch_size 2000\npause 250ms\n}", "", 2000, 250 * time.Millisecond},
		{"batch only", "reaper {\nbatch_size 50\n}", "", 50, jobs.DefaultReapPause},
		{"negative batch", "reaper {\nbatch_size -5\n}", "batch_size must be positive", 0, 0},
		{"negative pause", "reaper {\npause -1s\n}", "pause not negative", 0, 0},
		{"not a number", "reaper {\nbatch_size many\n}", "reaper batch_size", 0, 0},
		{"unknown option", "reaper {\nevery 1m\n}", "unknown reaper option", 0, 0},
		{"argument on the block", "reaper 5 {\n}", "wrong argument count", 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := new(App)
			err := a.UnmarshalCaddyfile(caddyfile.NewTestDispenser("comfygate {\n" + tt.block + "\n}"))
			if err == nil {
				a.applyDefaults()
				if err = a.provisionPools(); err == nil {
					err = a.Validate()
				}
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s := a.Reaper.sweep(); s.Batch != tt.wantBatch || s.Pause != tt.wantPause {
				t.Fatalf("sweep = %+v, want batch %d pause %v", s, tt.wantBatch, tt.wantPause)
			}
		})
	}
}
