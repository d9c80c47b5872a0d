package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Detail is one entry of a FastAPI-style 422 body: {"detail": [Detail...]}.
// Type uses Pydantic v2's vocabulary so the gateway's own refusals look like
// the partner's. Input is omitted when it is JSON null (omitempty cannot tell
// "absent" from null; an echoed null carries no information anyway).
type Detail struct {
	Loc   []any          `json:"loc"`
	Msg   string         `json:"msg"`
	Type  string         `json:"type"`
	Ctx   map[string]any `json:"ctx,omitempty"`
	Input any            `json:"input,omitempty"`
}

// ErrMalformed marks a body that is not JSON at all; the handler answers it
// with 400 invalid_input rather than a 422.
var ErrMalformed = errors.New("request body is not valid JSON")

// ValidateJSON decodes raw (numbers kept exact as json.Number) and validates
// it. A body that is not JSON returns an error wrapping ErrMalformed.
func (v *Validator) ValidateJSON(raw []byte) ([]Detail, error) {
	body, err := DecodeBody(raw)
	if err != nil {
		return nil, err
	}
	return v.Validate(body), nil
}

// DecodeBody decodes a call body the way Validate expects it, rejecting
// trailing data. Errors wrap ErrMalformed.
func DecodeBody(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var body any
	if err := dec.Decode(&body); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: trailing data after the JSON value", ErrMalformed)
	}
	return body, nil
}

// Validate checks a decoded body (as produced by encoding/json, with numbers
// as float64 or json.Number) and returns nil when it is acceptable. A body
// that is not a JSON object yields one dict_type detail at ["body"].
func (v *Validator) Validate(body any) []Detail {
	if _, ok := body.(map[string]any); !ok {
		return []Detail{{Loc: []any{"body"}, Msg: "Input should be a valid dictionary", Type: "dict_type", Input: body}}
	}
	st := state{max: v.maxErrors, segs: make([]seg, 0, 8)}
	st.check(v.root, body)
	return st.details
}

// seg is one step of the location being checked. The path lives in a slice
// owned by the state (pushed and popped around each descent) and is turned
// into a []any only when an error is reported; a linked list of stack frames
// would be neater but escape analysis moves recursive ones to the heap.
type seg struct {
	key   string
	idx   int
	isIdx bool
}

type state struct {
	details []Detail
	max     int
	segs    []seg
}

func (s *state) loc() []any {
	out := make([]any, 1+len(s.segs))
	out[0] = "body"
	for i, sg := range s.segs {
		if sg.isIdx {
			out[i+1] = sg.idx
		} else {
			out[i+1] = sg.key
		}
	}
	return out
}

func (s *state) pushKey(k string) { s.segs = append(s.segs, seg{key: k}) }
func (s *state) pushIdx(i int)    { s.segs = append(s.segs, seg{idx: i, isIdx: true}) }
func (s *state) pop()             { s.segs = s.segs[:len(s.segs)-1] }

func (s *state) full() bool { return s.max > 0 && len(s.details) >= s.max }

// add reports a detail at the current location.
func (s *state) add(typ, msg string, ctx map[string]any, input any) {
	if s.full() {
		return
	}
	s.details = append(s.details, Detail{Loc: s.loc(), Msg: msg, Type: typ, Ctx: ctx, Input: input})
}

// kindOf classifies a decoded JSON value; f is its numeric value if any.
func kindOf(val any) (k kind, f float64) {
	switch t := val.(type) {
	case nil:
		return kNull, 0
	case bool:
		return kBoolean, 0
	case string:
		return kString, 0
	case float64:
		if t == math.Trunc(t) && !math.IsInf(t, 0) {
			return kInteger | kNumber, t
		}
		return kNumber, t
	case json.Number:
		if x, err := t.Int64(); err == nil {
			return kInteger | kNumber, float64(x)
		}
		x, err := t.Float64()
		if err != nil && !math.IsInf(x, 0) {
			return kNumber, math.Inf(1)
		}
		// Out of range, x is the infinity of the literal's sign: -1e400
		// must fail a minimum, not pass it as +Inf did.
		if x == math.Trunc(x) {
			return kInteger | kNumber, x
		}
		return kNumber, x
	case int:
		return kInteger | kNumber, float64(t)
	case int64:
		return kInteger | kNumber, float64(t)
	case map[string]any:
		return kObject, 0
	case []any:
		return kArray, 0
	}
	return 0, 0
}

// check validates val against n, appending details to s.
func (s *state) check(n *node, val any) {
	if s.full() {
		return
	}
	if n.never {
		s.add("value_error", "Value error, no value is allowed here", nil, val)
		return
	}
	if n.refAlias != nil {
		s.check(n.refAlias, val)
	}
	k, f := kindOf(val)
	if n.types != 0 && n.types&k == 0 {
		s.typeError(n.types, k, val)
		return
	}
	if k == kNull && n.types&kNull != 0 {
		return // an allowed null carries no further constraints
	}
	if n.enum != nil && !containsValue(n.enum, val) {
		exp := expected(n.enum)
		s.add("enum", "Input should be "+exp, map[string]any{"expected": exp}, val)
		return
	}
	if n.hasConst && !equalValue(n.constVal, val) {
		exp := expected([]any{n.constVal})
		s.add("literal_error", "Input should be "+exp, map[string]any{"expected": exp}, val)
		return
	}
	switch {
	case k == kString:
		s.checkString(n, val.(string))
	case k&kNumber != 0:
		s.checkNumber(n, f, val)
	case k == kArray:
		s.checkArray(n, val.([]any))
	case k == kObject:
		s.checkObject(n, val.(map[string]any))
	}
	for _, sub := range n.allOf {
		s.check(sub, val)
	}
	if len(n.anyOf) > 0 {
		s.union(n.anyOf, val, false)
	}
	if len(n.oneOf) > 0 {
		s.union(n.oneOf, val, true)
	}
}

// typeError reports the Pydantic type error for the first non-null type the
// schema allows.
func (s *state) typeError(want, got kind, val any) {
	switch {
	case want&kInteger != 0 && want&kNumber == 0:
		if got&kNumber != 0 {
			s.add("int_from_float", "Input should be a valid integer, got a number with a fractional part", nil, val)
			return
		}
		s.add("int_type", "Input should be a valid integer", nil, val)
	case want&kNumber != 0:
		s.add("float_type", "Input should be a valid number", nil, val)
	case want&kString != 0:
		s.add("string_type", "Input should be a valid string", nil, val)
	case want&kBoolean != 0:
		s.add("bool_type", "Input should be a valid boolean", nil, val)
	case want&kObject != 0:
		s.add("dict_type", "Input should be a valid dictionary", nil, val)
	case want&kArray != 0:
		s.add("list_type", "Input should be a valid list", nil, val)
	default:
		s.add("none_required", "Input should be None", nil, val)
	}
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func (s *state) checkString(n *node, str string) {
	if n.minLen >= 0 || n.maxLen >= 0 {
		l := utf8.RuneCountInString(str)
		if n.minLen >= 0 && l < n.minLen {
			s.add("string_too_short", fmt.Sprintf("String should have at least %d %s", n.minLen,
				plural(n.minLen, "character", "characters")), map[string]any{"min_length": n.minLen}, str)
			return
		}
		if n.maxLen >= 0 && l > n.maxLen {
			s.add("string_too_long", fmt.Sprintf("String should have at most %d %s", n.maxLen,
				plural(n.maxLen, "character", "characters")), map[string]any{"max_length": n.maxLen}, str)
			return
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(str) {
		src := n.pattern.String()
		s.add("string_pattern_mismatch", "String should match pattern '"+src+"'",
			map[string]any{"pattern": src}, str)
		return
	}
	if n.formatURI && !looksLikeURI(str) {
		s.add("url_parsing", "Input should be a valid URL", nil, str)
	}
}

// numText renders a bound the way Python prints it: integers without ".0".
func numText(f float64) string {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// numCtx is the bound as it appears in ctx: an int when integral.
func numCtx(f float64) any {
	if f == math.Trunc(f) && math.Abs(f) < 1e15 {
		return int64(f)
	}
	return f
}

func (s *state) checkNumber(n *node, f float64, val any) {
	switch {
	case n.hasGE && n.ge.cmp(f, val) < 0:
		s.add("greater_than_equal", "Input should be greater than or equal to "+n.ge.text(),
			map[string]any{"ge": n.ge.ctx()}, val)
	case n.hasGT && n.gt.cmp(f, val) <= 0:
		s.add("greater_than", "Input should be greater than "+n.gt.text(),
			map[string]any{"gt": n.gt.ctx()}, val)
	case n.hasLE && n.le.cmp(f, val) > 0:
		s.add("less_than_equal", "Input should be less than or equal to "+n.le.text(),
			map[string]any{"le": n.le.ctx()}, val)
	case n.hasLT && n.lt.cmp(f, val) >= 0:
		s.add("less_than", "Input should be less than "+n.lt.text(),
			map[string]any{"lt": n.lt.ctx()}, val)
	case n.multipleOf != nil && !n.multipleOf.multipleOf(f, val):
		s.add("multiple_of", "Input should be a multiple of "+n.multipleOf.text(),
			map[string]any{"multiple_of": n.multipleOf.ctx()}, val)
	}
}

func (s *state) checkArray(n *node, arr []any) {
	if n.items != nil {
		for i, e := range arr {
			s.pushIdx(i)
			s.check(n.items, e)
			s.pop()
		}
	}
	if n.minItems >= 0 && len(arr) < n.minItems {
		s.add("too_short", fmt.Sprintf("List should have at least %d %s after validation, not %d",
			n.minItems, plural(n.minItems, "item", "items"), len(arr)),
			map[string]any{"field_type": "List", "min_length": n.minItems, "actual_length": len(arr)}, arr)
	} else if n.maxItems >= 0 && len(arr) > n.maxItems {
		s.add("too_long", fmt.Sprintf("List should have at most %d %s after validation, not %d",
			n.maxItems, plural(n.maxItems, "item", "items"), len(arr)),
			map[string]any{"field_type": "List", "max_length": n.maxItems, "actual_length": len(arr)}, arr)
	}
}

func (s *state) checkObject(n *node, obj map[string]any) {
	for _, name := range n.propOrder {
		val, ok := obj[name]
		if !ok {
			if contains(n.required, name) {
				s.pushKey(name)
				s.add("missing", "Field required", nil, obj)
				s.pop()
			}
			continue
		}
		s.pushKey(name)
		s.check(n.props[name], val)
		s.pop()
	}
	for _, name := range n.required {
		if _, declared := n.props[name]; declared {
			continue
		}
		if _, ok := obj[name]; !ok {
			s.pushKey(name)
			s.add("missing", "Field required", nil, obj)
			s.pop()
		}
	}
	if !n.noExtra && n.extra == nil {
		return
	}
	var extras []string // allocated only when there is an undeclared key
	for name := range obj {
		if _, declared := n.props[name]; !declared {
			extras = append(extras, name)
		}
	}
	sort.Strings(extras) // body maps have no order; make reports stable
	for _, name := range extras {
		s.pushKey(name)
		if n.noExtra {
			s.add("extra_forbidden", "Extra inputs are not permitted", nil, obj[name])
		} else {
			s.check(n.extra, obj[name])
		}
		s.pop()
	}
}

// union validates against each branch; when anyOf finds no match (or oneOf
// finds not exactly one) it reports the errors of the branch that came
// closest (fewest details), which for Optional[X] is X's own error.
func (s *state) union(branches []*node, val any, exactlyOne bool) {
	var best []Detail
	matched := 0
	for i, b := range branches {
		sub := state{max: s.max, segs: s.segs}
		sub.check(b, val)
		if len(sub.details) == 0 {
			matched++
			if !exactlyOne {
				return
			}
			continue
		}
		if i == 0 || len(sub.details) < len(best) || best == nil {
			best = sub.details
		}
	}
	switch {
	case matched == 1 && exactlyOne:
		return
	case matched > 1:
		s.add("value_error", fmt.Sprintf("Value error, input matches %d schemas but must match exactly one", matched),
			nil, val)
		return
	}
	for _, d := range best {
		if s.full() {
			return
		}
		s.details = append(s.details, d)
	}
}
