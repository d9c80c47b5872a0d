// Package jsonsyntax checks JSON syntax several times faster than
// encoding/json.Valid, with exactly its answers. Every submit checks its
// body and then its workflow before storing it, and json.Valid's
// byte-at-a-time state machine was a noticeable share of the gateway's CPU
// per submit.
package jsonsyntax

// maxDepth is encoding/json's nesting limit: deeper documents are invalid.
const maxDepth = 10000

// Valid reports whether b is one JSON value, optionally surrounded by
// white space, exactly as encoding/json.Valid does (in particular, bytes
// inside strings are not checked for UTF-8, and nesting deeper than 10 000
// is refused).
func Valid(b []byte) bool {
	// stack holds, per open container, '{' or '['.
	var buf [64]byte
	stack := buf[:0]
	i := SkipSpace(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false
		}
		switch c := b[i]; c {
		case '{', '[':
			if len(stack) >= maxDepth {
				return false
			}
			stack = append(stack, c)
			i = SkipSpace(b, i+1)
			if i < len(b) && b[i] == c+2 { // '}' or ']': empty container
				stack = stack[:len(stack)-1]
				i++
				break
			}
			if c == '{' {
				var ok bool
				if i, ok = key(b, i); !ok {
					return false
				}
			}
			continue
		case '"':
			var ok bool
			if i, ok = stringEnd(b, i); !ok {
				return false
			}
		case 't':
			if !literal(b, i, "true") {
				return false
			}
			i += 4
		case 'f':
			if !literal(b, i, "false") {
				return false
			}
			i += 5
		case 'n':
			if !literal(b, i, "null") {
				return false
			}
			i += 4
		default:
			var ok bool
			if i, ok = number(b, i); !ok {
				return false
			}
		}
		// A value ended just before b[i]: close containers, or go to the
		// next member or element.
		for {
			i = SkipSpace(b, i)
			if len(stack) == 0 {
				return i == len(b)
			}
			if i >= len(b) {
				return false
			}
			top := stack[len(stack)-1]
			switch b[i] {
			case ',':
				i = SkipSpace(b, i+1)
				if top == '{' {
					var ok bool
					if i, ok = key(b, i); !ok {
						return false
					}
				}
			case top + 2: // '}' or ']'
				stack = stack[:len(stack)-1]
				i++
				continue
			default:
				return false
			}
			break
		}
	}
}

// key reads a member name and its colon starting at b[i] and returns the
// index of the member's value (after white space).
func key(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return 0, false
	}
	i, ok := stringEnd(b, i)
	if !ok {
		return 0, false
	}
	i = SkipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return 0, false
	}
	return SkipSpace(b, i+1), true
}

// stringStop marks the bytes that end a run of plain string content.
var stringStop = func() (t [256]bool) {
	for c := range 0x20 {
		t[c] = true
	}
	t['"'], t['\\'] = true, true
	return t
}()

// stringEnd returns the index just past the string opening at b[i].
func stringEnd(b []byte, i int) (int, bool) {
	i++
	for {
		for i < len(b) && !stringStop[b[i]] {
			i++
		}
		if i >= len(b) {
			return 0, false
		}
		switch b[i] {
		case '"':
			return i + 1, true
		case '\\':
			i++
			if i >= len(b) {
				return 0, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return 0, false
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return 0, false
					}
				}
				i += 4
			default:
				return 0, false
			}
			i++
		default: // a control character
			return 0, false
		}
	}
}

// number returns the index just past the number starting at b[i]:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return 0, false
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func literal(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// SkipSpace returns the index of the first byte at or after i that is not
// JSON white space (len(b) if there is none).
func SkipSpace(b []byte, i int) int {
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
