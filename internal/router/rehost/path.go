// Package rehost copies the results a partner answers with (URLs that
// expire, base64 payloads) into the gateway's own storage as assets of the
// caller's account, and rewrites the answer to point at them.
//
// This file is the JSON-path walk: which members of an answer hold results.
package rehost

import (
	"fmt"
	"strconv"
	"strings"
)

// Path selects members of a JSON document. Its syntax is a small subset of
// JSONPath, written without the leading "$.":
//
//	result.sample        member "sample" of member "result"
//	images[*].url        member "url" of every element of array "images"
//	images[0]            first element of "images"
//	data.*               every member of object "data"
//	["odd.name"].url     a member whose name holds a dot or a bracket
//
// Array wildcards make a path select many members ("arrays of them"); a
// path that meets a missing member or a value of the wrong type simply
// selects nothing there.
type Path struct {
	raw   string
	steps []step
}

type step struct {
	name  string // object member; "" with index/wild
	index int    // array element when isIdx
	isIdx bool
	wild  bool // [*] (any element) or .* (any member)
}

// String is the path as written.
func (p Path) String() string { return p.raw }

// ParsePath parses a path.
func ParsePath(s string) (Path, error) {
	p := Path{raw: s}
	rest := strings.TrimPrefix(s, "$.")
	bad := func(why string) (Path, error) { return p, fmt.Errorf("path %q: %s", s, why) }
	if rest == "" {
		return bad("empty")
	}
	if rest[0] != '[' {
		rest = "." + rest // every step starts with . or [
	}
	for rest != "" {
		switch rest[0] {
		case '.':
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			name := rest[:end]
			if name == "" || strings.ContainsAny(name, "]\"'") {
				return bad("empty member name or one needing quotes")
			}
			p.steps = append(p.steps, step{name: name, wild: name == "*"})
			rest = rest[end:]
		case '[':
			if len(rest) > 1 && (rest[1] == '"' || rest[1] == '\'') {
				q := rest[1]
				close := strings.IndexByte(rest[2:], q)
				if close < 0 || len(rest) < close+4 || rest[close+3] != ']' {
					return bad("bad quoted member")
				}
				p.steps = append(p.steps, step{name: rest[2 : close+2]})
				rest = rest[close+4:]
				continue
			}
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return bad("unclosed [")
			}
			in := rest[1:end]
			if in == "*" {
				p.steps = append(p.steps, step{wild: true, isIdx: true})
			} else {
				n, err := strconv.Atoi(in)
				if err != nil || n < 0 || in != strconv.Itoa(n) {
					return bad(fmt.Sprintf("index %q is not * or a non-negative integer", in))
				}
				p.steps = append(p.steps, step{index: n, isIdx: true})
			}
			rest = rest[end+1:]
		default:
			return bad(fmt.Sprintf("expected . or [ before %q", rest))
		}
	}
	return p, nil
}

// Walk calls visit for every string value doc holds at p, with a setter
// that replaces it in place. doc is a value decoded by encoding/json into
// any (maps, slices, strings …). Values of another type are skipped.
func (p Path) Walk(doc any, visit func(v string, set func(string))) {
	walk(doc, p.steps, nil, visit)
}

func walk(v any, steps []step, set func(any), visit func(string, func(string))) {
	if len(steps) == 0 {
		if s, ok := v.(string); ok && set != nil {
			visit(s, func(n string) { set(n) })
		}
		return
	}
	st := steps[0]
	switch x := v.(type) {
	case map[string]any:
		if st.isIdx {
			return
		}
		if st.wild {
			for k := range x {
				k := k
				walk(x[k], steps[1:], func(n any) { x[k] = n }, visit)
			}
			return
		}
		if c, ok := x[st.name]; ok {
			walk(c, steps[1:], func(n any) { x[st.name] = n }, visit)
		}
	case []any:
		if !st.isIdx {
			return
		}
		if st.wild {
			for i := range x {
				i := i
				walk(x[i], steps[1:], func(n any) { x[i] = n }, visit)
			}
			return
		}
		if st.index < len(x) {
			walk(x[st.index], steps[1:], func(n any) { x[st.index] = n }, visit)
		}
	}
}
