// Package caddyfuzz is the fuzz target every comfygate module's
// UnmarshalCaddyfile shares: seeded with the module's blocks from
// caddyfile-examples, it checks that no Caddyfile text panics the parser
// and that what it accepts survives the JSON round trip Caddy's adapter
// makes of it (Caddy runs the JSON, not the Caddyfile).
package caddyfuzz

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// Fuzz runs the target for the directive (or global option, or module
// name as on_demand_tls permissions take it) that newV's value parses.
func Fuzz(f *testing.F, directive string, newV func() caddyfile.Unmarshaler, seeds ...string) {
	for _, s := range append(exampleBlocks(f, directive), seeds...) {
		f.Add(s)
	}
	f.Add(directive)
	f.Add(directive + " {\n}")
	f.Add(directive + " {\n\t{\n}")
	f.Add(directive + " a b c {\n\tx\n}\n" + directive)
	f.Fuzz(func(t *testing.T, input string) {
		first, err := parse(newV, input)
		if err != nil {
			return
		}
		raw, err := json.Marshal(first)
		if err != nil {
			t.Fatalf("accepted %q but its config does not encode: %v", input, err)
		}
		back := newV()
		if err := json.Unmarshal(raw, back); err != nil {
			t.Fatalf("accepted %q, whose JSON %s does not decode: %v", input, raw, err)
		}
		again, err := json.Marshal(back)
		if err != nil || !bytes.Equal(again, raw) {
			t.Fatalf("accepted %q: JSON %s round-trips to %s (%v)", input, raw, again, err)
		}
		second, err := parse(newV, input)
		if err != nil {
			t.Fatalf("%q parsed, then failed: %v", input, err)
		}
		if twice, _ := json.Marshal(second); !bytes.Equal(twice, raw) {
			t.Fatalf("%q parsed to %s, then to %s", input, raw, twice)
		}
	})
}

// parse tokenizes as Caddy does (a lexing error is the adapter's refusal;
// NewTestDispenser would exit the process) and unmarshals.
func parse(newV func() caddyfile.Unmarshaler, input string) (caddyfile.Unmarshaler, error) {
	tokens, err := caddyfile.Tokenize([]byte(input), "Caddyfile")
	if err != nil {
		return nil, err
	}
	v := newV()
	return v, v.UnmarshalCaddyfile(caddyfile.NewDispenser(tokens))
}

// exampleBlocks are the directive's lines, with their braced blocks, in
// the repository's example Caddyfiles.
func exampleBlocks(f *testing.F, directive string) []string {
	_, here, _, _ := runtime.Caller(0)
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(here), "..", "..", "caddyfile-examples", "*.Caddyfile"))
	var out []string
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		var block []string
		depth := 0
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			line := sc.Text()
			fields := strings.Fields(line)
			if depth == 0 && block == nil {
				if len(fields) == 0 || fields[0] != directive {
					continue
				}
			}
			block = append(block, strings.TrimSpace(line))
			depth += strings.Count(line, "{") - strings.Count(line, "}")
			if depth <= 0 {
				out = append(out, strings.Join(block, "\n"))
				block, depth = nil, 0
			}
		}
	}
	return out
}
