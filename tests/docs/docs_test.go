package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// root is the repository, two levels above this package.
const root = "../.."

// TestConfigurationReference (issue 27): docs/configuration.md lists every
// Caddyfile keyword that a comfygate module's parser accepts — directive
// and global option names, subdirectives, modes, backends — as a word of a
// code span in the first column of a table row, in a section whose heading
// names the module (the module's own name may be that heading). The
// keywords are read from the parsers' source (ParserKeywords), so a keyword
// added to a parser fails this test until the page lists it.
func TestConfigurationReference(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(root, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	page := ParsePage(string(text))
	modules := readModules(t)
	for _, m := range modules {
		rel, _ := filepath.Rel(root, m.Dir)
		for _, name := range m.Names {
			if !slices.ContainsFunc(page.Headings, func(h Heading) bool { return slices.Contains(h.Words, name) }) {
				t.Errorf("docs/configuration.md has no heading naming `%s` (%s)", name, rel)
			}
		}
		for _, k := range m.Keywords {
			if slices.Contains(m.Names, k.Word) {
				continue
			}
			if !listed(page, k.Word, m.Names) {
				t.Errorf("docs/configuration.md does not list `%s`, which %s accepts (%s), in a table under a heading naming %s",
					k.Word, rel, k.Where, quoteAll(m.Names))
			}
		}
	}
}

// listed reports whether a table row under a heading naming one of names
// has word in its first cell.
func listed(page Page, word string, names []string) bool {
	for _, row := range page.Rows {
		if !slices.Contains(row.First, word) {
			continue
		}
		for _, h := range row.Under {
			for _, n := range names {
				if slices.Contains(h.Words, n) {
					return true
				}
			}
		}
	}
	return false
}

// readModules reads every package under modules/ and checks that the
// reading found something: each package with a Caddyfile parser has a
// name, and the app has keywords of its own.
func readModules(t *testing.T) []Module {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(root, "modules", "*"))
	if err != nil {
		t.Fatal(err)
	}
	var out []Module
	for _, dir := range dirs {
		if info, err := os.Stat(dir); err != nil || !info.IsDir() {
			continue
		}
		m, err := ParserKeywords(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if len(m.Keywords) > 0 && len(m.Names) == 0 {
			t.Errorf("%s: its parsers accept %d keywords but it registers no Caddyfile name", dir, len(m.Keywords))
		}
		if len(m.Keywords) > 0 {
			out = append(out, m)
		}
	}
	if len(out) < 10 {
		t.Fatalf("read Caddyfile keywords from %d module packages; want every one under modules/", len(out))
	}
	return out
}

func quoteAll(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = "`" + n + "`"
	}
	return strings.Join(q, " or ")
}

// TestParserKeywordsForms checks the reading of keywords on a parser with
// each form a keyword takes in the modules' parsers, and with the strings
// that are not keywords (error messages, non-parser code).
func TestParserKeywordsForms(t *testing.T) {
	dir := t.TempDir()
	src := `package example

import (
	"errors"
	"fmt"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

const ModeFancy = "fancy"

func init() { httpcaddyfile.RegisterHandlerDirective("example_dir", parse) }

func parse(h httpcaddyfile.Helper) (any, error) { return nil, nil }

func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.example_id"}
}

func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	switch d.Val() {
	case "case_word", "second_case":
	case ModeFancy:
	default:
		return d.Errf("unknown option %q in error_word", d.Val())
	}
	if d.Val() == "equal_word" {
		return errors.New("message_word")
	}
	into := map[string]*string{"map_key": nil}[d.Val()]
	_ = into
	return h.helper(d.Val())
}

func (h *Handler) helper(opt string) error {
	switch opt {
	case "helper_word":
	}
	return fmt.Errorf("sprintf_word %s", opt)
}

func (h *Handler) Validate() error {
	if h.Mode != "valid_word" {
		return errors.New("validate_message")
	}
	return nil
}

func unrelated() string { return "unrelated_word" }
`
	if err := os.WriteFile(filepath.Join(dir, "example.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "example_test.go"), []byte("package example\n\nconst x = \"test_word\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m, err := ParserKeywords(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range m.Keywords {
		got = append(got, k.Word)
	}
	want := []string{"case_word", "equal_word", "example_dir", "example_id", "fancy", "helper_word", "map_key", "second_case", "valid_word"}
	if !slices.Equal(got, want) {
		t.Errorf("keywords %v, want %v", got, want)
	}
	if wantNames := []string{"example_dir", "example_id"}; !slices.Equal(m.Names, wantNames) {
		t.Errorf("names %v, want %v", m.Names, wantNames)
	}
}

// TestLinks (issue 27): every relative link and image in README.md,
// BENCHMARKS.md and docs/ leads to a file or directory that exists, and a
// #fragment to a heading of the Markdown page it names.
func TestLinks(t *testing.T) {
	pages := []string{filepath.Join(root, "README.md"), filepath.Join(root, "BENCHMARKS.md")}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			pages = append(pages, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	parsed := map[string]Page{}
	read := func(path string) (Page, error) {
		if p, ok := parsed[path]; ok {
			return p, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return Page{}, err
		}
		parsed[path] = ParsePage(string(text))
		return parsed[path], nil
	}
	scheme := regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	checked := 0
	for _, path := range pages {
		page, err := read(path)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, l := range page.Links {
			if scheme.MatchString(l.Target) {
				continue // http(s), mailto: not this test's
			}
			checked++
			target, fragment, _ := strings.Cut(l.Target, "#")
			dest := path
			if target != "" {
				dest = filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s:%d: %s leads nowhere (%v)", rel, l.Line, l.Target, err)
					continue
				}
			}
			if fragment == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			to, err := read(dest)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", rel, l.Line, l.Target, err)
				continue
			}
			if !slices.ContainsFunc(to.Headings, func(h Heading) bool { return h.Anchor == fragment }) {
				t.Errorf("%s:%d: %s: no heading with the anchor #%s", rel, l.Line, l.Target, fragment)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d relative links in %d pages; the link reading is broken", checked, len(pages))
	}
}

// TestSlug checks the anchors against GitHub's for this repository's kind
// of headings.
func TestSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"The `comfygate` global option":                          "the-comfygate-global-option",
		"`comfy_assets`, `comfy_jobs`, `comfy_native`":           "comfy_assets-comfy_jobs-comfy_native",
		"As a service (systemd)":                                 "as-a-service-systemd",
		"Security: who can reach what":                           "security-who-can-reach-what",
		"ComfyUI pools, fleets and the ComfyUI-compatible front": "comfyui-pools-fleets-and-the-comfyui-compatible-front",
	} {
		if got := Slug(heading); got != want {
			t.Errorf("Slug(%q) = %q, want %q", heading, got, want)
		}
	}
}
