// Package version says which comfygate a binary holds, from the build
// information the Go toolchain embeds: the main module's version and VCS
// stamp when comfygate is the main module (`go build ./cmd/comfygate` in a
// checkout, `go install …/cmd/comfygate@v…`), or comfygate's entry in the
// dependency list when it is a plugin of another build (xcaddy).
package version

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/mod/module"
)

// Module is comfygate's module path.
const Module = "github.com/comfygate/comfygate"

// caddyModule is Caddy's module path.
const caddyModule = "github.com/caddyserver/caddy/v2"

// Info describes the comfygate in one binary. Fields the build did not
// record are empty.
type Info struct {
	// Version is the module version: a release tag, a pseudo-version
	// (v0.0.0-<time>-<commit>, "+dirty" when stamped from a modified
	// tree) or "(devel)" when the toolchain recorded none.
	Version string
	// Replacement is where a plugin build took the module from instead
	// ("<path>" or "<path>@<version>"), as go.mod's replace directive said.
	Replacement string
	// Revision is the commit: the VCS stamp of a checkout build, or the
	// commit a pseudo-version names.
	Revision string
	// Time is the commit time, when known.
	Time time.Time
	// Modified reports a checkout build from a tree with uncommitted
	// changes.
	Modified bool
	// Caddy is the version of Caddy the binary is built on.
	Caddy string
}

// Read returns the running binary's Info.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "(unknown)"}
	}
	return FromBuildInfo(bi)
}

// FromBuildInfo returns the Info that bi records.
func FromBuildInfo(bi *debug.BuildInfo) Info {
	var info Info
	for _, dep := range bi.Deps {
		if dep.Path == caddyModule {
			info.Caddy = moduleVersion(dep)
		}
	}
	if bi.Main.Path == Module {
		info.Version = bi.Main.Version
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time, _ = time.Parse(time.RFC3339, s.Value)
			case "vcs.modified":
				info.Modified, _ = strconv.ParseBool(s.Value)
			}
		}
	} else {
		for _, dep := range bi.Deps {
			if dep.Path != Module {
				continue
			}
			info.Version = dep.Version
			if r := dep.Replace; r != nil {
				info.Replacement = r.Path
				if r.Version != "" {
					info.Replacement += "@" + r.Version
				}
			}
		}
	}
	if info.Version == "" {
		info.Version = "(unknown)"
	}
	if info.Revision == "" && info.Replacement == "" {
		info.Revision, info.Time = fromPseudoVersion(info.Version)
	}
	return info
}

// moduleVersion is a dependency's version, or its replacement's.
func moduleVersion(m *debug.Module) string {
	if m.Replace != nil && m.Replace.Version != "" {
		return m.Replace.Version
	}
	return m.Version
}

// fromPseudoVersion returns the commit and time a pseudo-version names
// ("" and zero for anything else, including the zero pseudo-version Go
// gives a replaced module).
func fromPseudoVersion(v string) (string, time.Time) {
	v, _, _ = strings.Cut(v, "+")
	if !module.IsPseudoVersion(v) {
		return "", time.Time{}
	}
	rev, err := module.PseudoVersionRev(v)
	if err != nil || strings.Trim(rev, "0") == "" {
		return "", time.Time{}
	}
	t, _ := module.PseudoVersionTime(v)
	return rev, t
}

// String is one line: "comfygate <version> (commit <rev>, <time>[,
// modified]) caddy <version>", with "commit unknown" when the build recorded
// no commit.
func (i Info) String() string {
	var b strings.Builder
	b.WriteString("comfygate " + i.Version)
	if i.Replacement != "" {
		b.WriteString(" => " + i.Replacement)
	}
	switch {
	case i.Revision == "":
		b.WriteString(" (commit unknown)")
	default:
		b.WriteString(" (commit " + i.Revision)
		if !i.Time.IsZero() {
			b.WriteString(", " + i.Time.UTC().Format(time.RFC3339))
		}
		if i.Modified {
			b.WriteString(", modified")
		}
		b.WriteString(")")
	}
	if i.Caddy != "" {
		fmt.Fprintf(&b, " caddy %s", i.Caddy)
	}
	return b.String()
}
