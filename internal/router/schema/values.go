package schema

import (
	"encoding/json"
	"reflect"
	"strings"
)

// looksLikeURI is deliberately light and allocation-free: a scheme, no
// whitespace or control characters, and for "scheme://" URLs a non-empty
// host. data: URIs (which partners accept for images) pass.
func looksLikeURI(str string) bool {
	colon := strings.IndexByte(str, ':')
	if colon < 1 {
		return false
	}
	for i := 0; i < colon; i++ {
		c := str[i]
		alpha := c|0x20 >= 'a' && c|0x20 <= 'z'
		if !alpha && (i == 0 || !(c >= '0' && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return false
		}
	}
	for i := 0; i < len(str); i++ {
		if str[i] <= ' ' || str[i] == 0x7f {
			return false
		}
	}
	rest := str[colon+1:]
	if !strings.HasPrefix(rest, "//") {
		return rest != ""
	}
	host := rest[2:]
	if i := strings.IndexAny(host, "/?#"); i >= 0 {
		host = host[:i]
	}
	if at := strings.LastIndexByte(host, '@'); at >= 0 {
		host = host[at+1:]
	}
	return host != "" && host[0] != ':'
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func containsValue(list []any, val any) bool {
	for _, x := range list {
		if equalValue(x, val) {
			return true
		}
	}
	return false
}

// equalValue compares a plain schema literal with a body value, treating
// numbers by value whatever their Go representation.
func equalValue(lit, val any) bool {
	switch l := lit.(type) {
	case string:
		s, ok := val.(string)
		return ok && s == l
	case bool:
		b, ok := val.(bool)
		return ok && b == l
	case nil:
		return val == nil
	case float64:
		k, f := kindOf(val)
		return k&kNumber != 0 && f == l
	case number:
		k, f := kindOf(val)
		return k&kNumber != 0 && l.cmp(f, val) == 0
	}
	return reflect.DeepEqual(lit, normalize(val))
}

// normalize converts json.Number inside composite body values to float64 so
// composite enum literals compare with DeepEqual.
func normalize(v any) any {
	switch t := v.(type) {
	case json.Number:
		f, _ := t.Float64()
		return f
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = normalize(e)
		}
		return m
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = normalize(e)
		}
		return out
	}
	return v
}

// expected renders allowed values the way Pydantic does: 'a', 'b' or 'c'.
func expected(vals []any) string {
	parts := make([]string, len(vals))
	for i, v := range vals {
		switch t := v.(type) {
		case string:
			parts[i] = "'" + t + "'"
		case float64:
			parts[i] = numText(t)
		case number:
			parts[i] = t.text()
		case bool:
			if t {
				parts[i] = "True"
			} else {
				parts[i] = "False"
			}
		case nil:
			parts[i] = "None"
		default:
			b, _ := json.Marshal(t)
			parts[i] = string(b)
		}
	}
	if len(parts) <= 1 {
		return strings.Join(parts, "")
	}
	return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
}
