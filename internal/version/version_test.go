package version

import (
	"runtime/debug"
	"testing"
	"time"
)

func TestFromBuildInfo(t *testing.T) {
	caddy := &debug.Module{Path: caddyModule, Version: "v2.11.9", Sum: "h1:x"}
	const pseudo = "v0.0.0-20261124120000-0d3a1a1c5b2e"
	commitTime := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		bi   debug.BuildInfo
		want Info
		line string
	}{
		{
			name: "checkout build with a VCS stamp",
			bi: debug.BuildInfo{
				Main: debug.Module{Path: Module, Version: pseudo + "+dirty"},
				Deps: []*debug.Module{caddy},
				Settings: []debug.BuildSetting{
					{Key: "vcs", Value: "git"},
					{Key: "vcs.revision", Value: "0d3a1a1c5b2e9f00112233445566778899aabbcc"},
					{Key: "vcs.time", Value: "2026-11-24T12:00:00Z"},
					{Key: "vcs.modified", Value: "true"},
				},
			},
			want: Info{Version: pseudo + "+dirty", Revision: "0d3a1a1c5b2e9f00112233445566778899aabbcc", Time: commitTime, Modified: true, Caddy: "v2.11.9"},
			line: "comfygate " + pseudo + "+dirty (commit 0d3a1a1c5b2e9f00112233445566778899aabbcc, 2026-11-24T12:00:00Z, modified) caddy v2.11.9",
		},
		{
			name: "checkout build without a VCS stamp",
			bi:   debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}, Deps: []*debug.Module{caddy}},
			want: Info{Version: "(devel)", Caddy: "v2.11.9"},
			line: "comfygate (devel) (commit unknown) caddy v2.11.9",
		},
		{
			name: "go install of a pseudo-version",
			bi:   debug.BuildInfo{Main: debug.Module{Path: Module, Version: pseudo}, Deps: []*debug.Module{caddy}},
			want: Info{Version: pseudo, Revision: "0d3a1a1c5b2e", Time: commitTime, Caddy: "v2.11.9"},
			line: "comfygate " + pseudo + " (commit 0d3a1a1c5b2e, 2026-11-24T12:00:00Z) caddy v2.11.9",
		},
		{
			name: "plugin at a pseudo-version",
			bi: debug.BuildInfo{Main: debug.Module{Path: "caddy", Version: "(devel)"}, Deps: []*debug.Module{
				caddy, {Path: Module, Version: pseudo, Sum: "h1:y"},
			}},
			want: Info{Version: pseudo, Revision: "0d3a1a1c5b2e", Time: commitTime, Caddy: "v2.11.9"},
			line: "comfygate " + pseudo + " (commit 0d3a1a1c5b2e, 2026-11-24T12:00:00Z) caddy v2.11.9",
		},
		{
			name: "plugin at a release",
			bi: debug.BuildInfo{Main: debug.Module{Path: "caddy"}, Deps: []*debug.Module{
				caddy, {Path: Module, Version: "v1.2.0", Sum: "h1:y"},
			}},
			want: Info{Version: "v1.2.0", Caddy: "v2.11.9"},
			line: "comfygate v1.2.0 (commit unknown) caddy v2.11.9",
		},
		{
			name: "plugin replaced by a local directory",
			bi: debug.BuildInfo{Main: debug.Module{Path: "caddy"}, Deps: []*debug.Module{
				caddy, {Path: Module, Version: "v0.0.0-00010101000000-000000000000", Replace: &debug.Module{Path: "/src/comfygate"}},
			}},
			want: Info{Version: "v0.0.0-00010101000000-000000000000", Replacement: "/src/comfygate", Caddy: "v2.11.9"},
			line: "comfygate v0.0.0-00010101000000-000000000000 => /src/comfygate (commit unknown) caddy v2.11.9",
		},
		{
			name: "caddy replaced by a fork at a version",
			bi: debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v1.0.0"}, Deps: []*debug.Module{
				{Path: caddyModule, Version: "v2.11.9", Replace: &debug.Module{Path: "example.com/caddy", Version: "v2.11.10"}},
			}},
			want: Info{Version: "v1.0.0", Caddy: "v2.11.10"},
			line: "comfygate v1.0.0 (commit unknown) caddy v2.11.10",
		},
		{
			name: "a binary without comfygate",
			bi:   debug.BuildInfo{Main: debug.Module{Path: "caddy"}},
			want: Info{Version: "(unknown)"},
			line: "comfygate (unknown) (commit unknown)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := FromBuildInfo(&tt.bi)
			if got != tt.want {
				t.Errorf("FromBuildInfo = %+v, want %+v", got, tt.want)
			}
			if s := got.String(); s != tt.line {
				t.Errorf("String() = %q, want %q", s, tt.line)
			}
		})
	}
}

// TestReadThisBinary reads the test binary's own build information, where
// comfygate is the main module (and Caddy is not linked in).
func TestReadThisBinary(t *testing.T) {
	if info := Read(); info.Version == "" || info.Version == "(unknown)" {
		t.Errorf("Read() = %+v: comfygate not found as the main module", info)
	}
}
