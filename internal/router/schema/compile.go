// Package schema validates a model call body against the partner model's
// OpenAPI input schema before the router dispatches it, and reports failures
// in the FastAPI/Pydantic v2 `detail[]` shape partners themselves use, so a
// caller sees the same 422 whether the gateway or the partner refused.
//
// A document is compiled once (Compile) into a tree of nodes with regexps,
// bounds and $ref targets resolved; validating a body walks that tree and
// allocates only when it has something to report.
//
// Supported JSON Schema subset: type (string or array form, integer vs
// number, OpenAPI 3.0 `nullable`), properties, required, additionalProperties
// (bool or schema), enum, const, minimum/maximum, exclusiveMinimum/
// exclusiveMaximum (3.0 booleans and 3.1 numbers), multipleOf (numbers
// compared exactly: see number), minLength/maxLength,
// pattern (Go RE2; a pattern Go cannot compile is skipped, not fatal),
// format "uri"/"url" (light check), items, minItems/maxItems,
// allOf/anyOf/oneOf, and local $ref. `default`, `title`, `description` and
// unknown keywords are ignored. Typing is strict JSON Schema: "5" is not an
// integer even though Pydantic's lax mode would coerce it.
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
)

// kind is a bit set of JSON types.
type kind uint8

const (
	kObject kind = 1 << iota
	kArray
	kString
	kInteger
	kNumber
	kBoolean
	kNull
)

var kindNames = map[string]kind{
	"object": kObject, "array": kArray, "string": kString, "integer": kInteger,
	"number": kNumber, "boolean": kBoolean, "null": kNull,
}

// node is one compiled schema. The zero node accepts anything.
type node struct {
	types kind // 0: any type
	never bool // the `false` schema: nothing is valid

	props     map[string]*node
	propOrder []string
	required  []string
	noExtra   bool  // additionalProperties: false
	extra     *node // additionalProperties: {schema}

	enum     []any // plain values
	hasConst bool
	constVal any

	ge, gt, le, lt             number
	hasGE, hasGT, hasLE, hasLT bool
	multipleOf                 *number
	minLen, maxLen             int // -1: unset
	pattern                    *regexp.Regexp
	formatURI                  bool
	items                      *node
	minItems, maxItems         int // -1: unset
	allOf, anyOf, oneOf        []*node
	refAlias                   *node // the target of a $ref (with or without siblings)
	refName                    string
}

// Validator validates call bodies against one compiled input schema. It is
// immutable and safe for concurrent use.
type Validator struct {
	root *node
	// MaxErrors bounds the number of details reported for one body, so a
	// hostile body cannot make the 422 response arbitrarily large.
	maxErrors int
}

// DefaultMaxErrors is the cap on details reported for one body.
const DefaultMaxErrors = 50

type compiler struct {
	doc  any
	refs map[string]*node
}

// Compile finds the request schema in an OpenAPI document and compiles it.
// The request schema is the `application/json` requestBody schema of the
// document's only POST operation or, when there is no single POST operation,
// `components.schemas.Input`.
func Compile(doc []byte) (*Validator, error) {
	root, err := decodeOrdered(doc)
	if err != nil {
		return nil, fmt.Errorf("schema document is not valid JSON: %w", err)
	}
	if _, ok := root.(*object); !ok {
		return nil, errors.New("schema document is not a JSON object")
	}
	c := &compiler{doc: root, refs: map[string]*node{}}
	raw, err := c.requestSchema()
	if err != nil {
		return nil, err
	}
	n, err := c.compile(raw, "#request")
	if err != nil {
		return nil, err
	}
	if err := checkCycles(n); err != nil {
		return nil, err
	}
	return &Validator{root: n, maxErrors: DefaultMaxErrors}, nil
}

// compile turns one schema value into a node. where names the position for
// error messages.
func (c *compiler) compile(v any, where string) (*node, error) {
	switch t := v.(type) {
	case bool:
		if t {
			return &node{minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}, nil
		}
		return &node{never: true, minLen: -1, maxLen: -1, minItems: -1, maxItems: -1}, nil
	case *object:
		return c.compileObject(t, where)
	case nil:
		return nil, fmt.Errorf("%s: schema is missing", where)
	}
	return nil, fmt.Errorf("%s: schema is %T, not an object", where, v)
}

func (c *compiler) compileRef(ref string) (*node, error) {
	if n, ok := c.refs[ref]; ok {
		return n, nil // already compiled or in progress: recursion shares the node
	}
	target, err := c.pointer(ref)
	if err != nil {
		return nil, err
	}
	obj, ok := target.(*object)
	if !ok {
		if b, isBool := target.(bool); isBool {
			return c.compile(b, ref)
		}
		return nil, fmt.Errorf("$ref %q is not a schema object", ref)
	}
	n := &node{}
	c.refs[ref] = n
	if err := c.fill(n, obj, ref); err != nil {
		return nil, err
	}
	return n, nil
}

func (c *compiler) compileObject(o *object, where string) (*node, error) {
	n := &node{}
	if err := c.fill(n, o, where); err != nil {
		return nil, err
	}
	return n, nil
}

// plainLit is plain, except that a number keeps its literal, so that an
// enum or const of one compares exactly (see number).
func plainLit(v any) any {
	if n, ok := v.(json.Number); ok {
		if lit, ok := numberOf(n); ok {
			return lit
		}
	}
	return plain(v)
}

// numLit is a schema keyword's number with its literal.
func numLit(v any) (number, bool) {
	if n, ok := v.(json.Number); ok {
		return numberOf(n)
	}
	return number{}, false
}

func num(v any) (float64, bool) {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func intKeyword(o *object, k string, where string) (int, error) {
	v, ok := o.get(k)
	if !ok {
		return -1, nil
	}
	f, ok := num(v)
	if !ok || f < 0 || f != float64(int(f)) {
		return 0, fmt.Errorf("%s: %s must be a non-negative integer", where, k)
	}
	return int(f), nil
}

// fill compiles the keywords of o into n.
func (c *compiler) fill(n *node, o *object, where string) error {
	n.minLen, n.maxLen, n.minItems, n.maxItems = -1, -1, -1, -1
	if ref, ok := o.vals["$ref"].(string); ok {
		target, err := c.compileRef(ref)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		n.refAlias, n.refName = target, ref
	}
	if err := c.fillType(n, o, where); err != nil {
		return err
	}
	if props, ok := o.vals["properties"].(*object); ok {
		n.props = make(map[string]*node, len(props.keys))
		for _, k := range props.keys {
			pn, err := c.compile(props.vals[k], where+"/properties/"+k)
			if err != nil {
				return err
			}
			n.props[k] = pn
			n.propOrder = append(n.propOrder, k)
		}
	}
	if req, ok := o.vals["required"].([]any); ok {
		for _, r := range req {
			if s, ok := r.(string); ok {
				n.required = append(n.required, s)
			}
		}
	}
	switch ap := o.vals["additionalProperties"].(type) {
	case bool:
		n.noExtra = !ap
	case *object:
		en, err := c.compile(ap, where+"/additionalProperties")
		if err != nil {
			return err
		}
		n.extra = en
	}
	if e, ok := o.vals["enum"].([]any); ok {
		n.enum = make([]any, len(e))
		for i, x := range e {
			n.enum[i] = plainLit(x)
		}
	}
	if cv, ok := o.get("const"); ok {
		n.hasConst, n.constVal = true, plainLit(cv)
	}
	if err := fillNumeric(n, o, where); err != nil {
		return err
	}
	var err error
	if n.minLen, err = intKeyword(o, "minLength", where); err != nil {
		return err
	}
	if n.maxLen, err = intKeyword(o, "maxLength", where); err != nil {
		return err
	}
	if n.minItems, err = intKeyword(o, "minItems", where); err != nil {
		return err
	}
	if n.maxItems, err = intKeyword(o, "maxItems", where); err != nil {
		return err
	}
	if p, ok := o.vals["pattern"].(string); ok {
		// Partner patterns are written for Python/JS engines; one Go's RE2
		// cannot compile is skipped rather than making the model unusable.
		if re, err := regexp.Compile(p); err == nil {
			n.pattern = re
		}
	}
	if f, ok := o.vals["format"].(string); ok && (f == "uri" || f == "url") {
		n.formatURI = true
	}
	if it, ok := o.get("items"); ok {
		if _, isArr := it.([]any); !isArr { // tuple form unsupported: ignored
			in, err := c.compile(it, where+"/items")
			if err != nil {
				return err
			}
			n.items = in
		}
	}
	for _, kw := range []string{"allOf", "anyOf", "oneOf"} {
		list, ok := o.vals[kw].([]any)
		if !ok {
			continue
		}
		nodes := make([]*node, 0, len(list))
		for i, s := range list {
			sn, err := c.compile(s, fmt.Sprintf("%s/%s/%d", where, kw, i))
			if err != nil {
				return err
			}
			nodes = append(nodes, sn)
		}
		switch kw {
		case "allOf":
			n.allOf = nodes
		case "anyOf":
			n.anyOf = nodes
		case "oneOf":
			n.oneOf = nodes
		}
	}
	return nil
}

func (c *compiler) fillType(n *node, o *object, where string) error {
	switch t := o.vals["type"].(type) {
	case string:
		k, ok := kindNames[t]
		if !ok {
			return fmt.Errorf("%s: unknown type %q", where, t)
		}
		n.types = k
	case []any:
		for _, e := range t {
			s, _ := e.(string)
			k, ok := kindNames[s]
			if !ok {
				return fmt.Errorf("%s: unknown type %v", where, e)
			}
			n.types |= k
		}
	}
	if nb, _ := o.vals["nullable"].(bool); nb && n.types != 0 {
		n.types |= kNull
	}
	if n.types&kNumber != 0 {
		n.types |= kInteger // every integer is a number
	}
	return nil
}

func fillNumeric(n *node, o *object, where string) error {
	if v, ok := o.get("minimum"); ok {
		f, ok := numLit(v)
		if !ok {
			return fmt.Errorf("%s: minimum must be a number", where)
		}
		if ex, _ := o.vals["exclusiveMinimum"].(bool); ex {
			n.gt, n.hasGT = f, true
		} else {
			n.ge, n.hasGE = f, true
		}
	}
	if v, ok := o.get("maximum"); ok {
		f, ok := numLit(v)
		if !ok {
			return fmt.Errorf("%s: maximum must be a number", where)
		}
		if ex, _ := o.vals["exclusiveMaximum"].(bool); ex {
			n.lt, n.hasLT = f, true
		} else {
			n.le, n.hasLE = f, true
		}
	}
	if f, ok := numLit(o.vals["exclusiveMinimum"]); ok {
		n.gt, n.hasGT = f, true
	}
	if f, ok := numLit(o.vals["exclusiveMaximum"]); ok {
		n.lt, n.hasLT = f, true
	}
	if v, ok := o.get("multipleOf"); ok {
		f, ok := numLit(v)
		if !ok || !(f.f > 0) || math.IsInf(f.f, 0) {
			return fmt.Errorf("%s: multipleOf must be a number greater than 0", where)
		}
		n.multipleOf = &f
	}
	return nil
}
