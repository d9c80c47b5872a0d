package workflow

import (
	"encoding/json"
	"unicode/utf8"
)

// Fast paths for the JSON shapes every submit is made of (objects with
// plain member names, plain strings, `["id", 0]` links). A submit used to be
// decoded level by level with json.Unmarshal, which re-validated and copied
// each level's bytes again and cost more CPU than the rest of the request.
// Each helper answers exactly what json.Unmarshal would, or reports that it
// does not handle the input, and the caller then falls back to
// json.Unmarshal.

// objectMembers splits raw, a JSON object already known to be valid
// (json.Valid or a member of a value that was), into its members as
// json.Unmarshal into map[string]json.RawMessage would: each value's bytes
// without surrounding space, the last of duplicate names winning. Values
// are sub-slices of raw, not copies. ok is false when raw is not an object
// or a member name has escapes or non-ASCII bytes (whose decoding is left
// to json.Unmarshal).
func objectMembers(raw []byte) (map[string]json.RawMessage, bool) {
	m := map[string]json.RawMessage{}
	if !eachMember(raw, func(name []byte, value json.RawMessage) { m[intern(name)] = value }) {
		return nil, false
	}
	return m, true
}

// eachMember calls fn for each member of raw in order, on the terms of
// objectMembers; when it returns false, fn may have seen some members and
// the caller must discard what it gathered. name is raw's own bytes (no
// string is allocated for a name the caller only compares).
func eachMember(raw []byte, fn func(name []byte, value json.RawMessage)) bool {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return false
	}
	i = skipSpace(raw, i+1)
	if i < len(raw) && raw[i] == '}' {
		return skipSpace(raw, i+1) == len(raw)
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return false
		}
		end, ok := plainStringEnd(raw, i)
		if !ok {
			return false
		}
		name := raw[i+1 : end]
		i = skipSpace(raw, end+1)
		if i >= len(raw) || raw[i] != ':' {
			return false
		}
		start := skipSpace(raw, i+1)
		stop, ok := valueEnd(raw, start)
		if !ok {
			return false
		}
		fn(name, raw[start:stop:stop])
		i = skipSpace(raw, stop)
		if i >= len(raw) {
			return false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return skipSpace(raw, i+1) == len(raw)
		default:
			return false
		}
	}
}

// plainString returns the value of raw when it is a JSON string that needs
// no decoding: no escapes, no control characters, valid UTF-8.
func plainString(raw []byte) (string, bool) {
	if !isPlainString(raw) {
		return "", false
	}
	return string(raw[1 : len(raw)-1]), true
}

// isPlainString reports whether plainString handles raw, without
// allocating the string.
func isPlainString(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return false
	}
	inner := raw[1 : len(raw)-1]
	for _, c := range inner {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
	}
	return utf8.Valid(inner)
}

// plainStringEnd returns the index of the quote closing the string that
// opens at raw[start], when the string is ASCII without escapes.
func plainStringEnd(raw []byte, start int) (int, bool) {
	for j := start + 1; j < len(raw); j++ {
		switch c := raw[j]; {
		case c == '"':
			return j, true
		case c == '\\' || c < 0x20 || c >= 0x80:
			return 0, false
		}
	}
	return 0, false
}

// valueEnd returns the index just past the JSON value starting at
// raw[start]. raw is assumed valid: it only balances brackets (outside
// strings) and finds where a string or literal ends.
func valueEnd(raw []byte, start int) (int, bool) {
	if start >= len(raw) {
		return 0, false
	}
	switch raw[start] {
	case '"':
		end, ok := stringEnd(raw, start)
		return end + 1, ok
	case '{', '[':
		depth := 0
		for j := start; j < len(raw); j++ {
			switch raw[j] {
			case '"':
				end, ok := stringEnd(raw, j)
				if !ok {
					return 0, false
				}
				j = end
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, true
				}
			}
		}
		return 0, false
	}
	j := start
	for j < len(raw) && !isDelimiter(raw[j]) {
		j++
	}
	return j, j > start
}

// plainLink reads the common link form `["id", slot]` (plain id string,
// slot a decimal integer without sign, fraction or exponent). ok is false
// for anything else, which parseLink then decodes in full.
func plainLink(raw []byte) (Link, bool) {
	id, slot, ok := plainLinkBytes(raw)
	if !ok {
		return Link{}, false
	}
	return Link{Node: string(id), Slot: slot}, true
}

// plainLinkBytes is plainLink with the id left in raw's bytes, for callers
// that only look it up.
func plainLinkBytes(raw []byte) (id []byte, slot int, ok bool) {
	if len(raw) == 0 || raw[0] != '[' {
		return nil, 0, false
	}
	i := skipSpace(raw, 1)
	if i >= len(raw) || raw[i] != '"' {
		return nil, 0, false
	}
	end, ok := stringEnd(raw, i)
	if !ok || !isPlainString(raw[i:end+1]) {
		return nil, 0, false
	}
	id = raw[i+1 : end]
	i = skipSpace(raw, end+1)
	if i >= len(raw) || raw[i] != ',' {
		return nil, 0, false
	}
	i = skipSpace(raw, i+1)
	start := i
	for i < len(raw) && raw[i] >= '0' && raw[i] <= '9' {
		slot = slot*10 + int(raw[i]-'0')
		i++
		if i-start > 9 { // beyond 999 999 999: let the full decode judge
			return nil, 0, false
		}
	}
	if i == start || (raw[start] == '0' && i-start > 1) {
		return nil, 0, false
	}
	i = skipSpace(raw, i)
	if i != len(raw)-1 || raw[i] != ']' {
		return nil, 0, false
	}
	return id, slot, true
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON white space (len(b) if there is none).
func skipSpace(b []byte, i int) int {
	for i < len(b) {
		switch b[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
