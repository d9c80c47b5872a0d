package schema

import (
	"errors"
	"fmt"
	"strings"
)

// requestSchema locates the call body schema inside the OpenAPI document.
func (c *compiler) requestSchema() (any, error) {
	var posts []any
	if paths, ok := lookup(c.doc, "paths").(*object); ok {
		for _, p := range paths.keys {
			item, err := c.deref(paths.vals[p])
			if err != nil {
				return nil, err
			}
			if op := lookup(item, "post"); op != nil {
				posts = append(posts, op)
			}
		}
	}
	if len(posts) == 1 {
		body, err := c.deref(lookup(posts[0], "requestBody"))
		if err != nil {
			return nil, err
		}
		if content, ok := lookup(body, "content").(*object); ok {
			if s := lookup(content, "application/json", "schema"); s != nil {
				return s, nil
			}
			for _, ct := range content.keys {
				if strings.HasPrefix(ct, "application/json") {
					if s := lookup(content, ct, "schema"); s != nil {
						return s, nil
					}
				}
			}
		}
	}
	if s := lookup(c.doc, "components", "schemas", "Input"); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("no request schema: want one POST operation with an application/json requestBody "+
		"or components.schemas.Input (found %d POST operations)", len(posts))
}

// lookup walks object keys; it returns nil when any step is missing.
func lookup(v any, keys ...string) any {
	for _, k := range keys {
		o, ok := v.(*object)
		if !ok {
			return nil
		}
		v = o.vals[k]
	}
	return v
}

// deref follows a $ref chain (bounded) and returns the referenced value.
func (c *compiler) deref(v any) (any, error) {
	for i := 0; i < 32; i++ {
		ref, ok := lookup(v, "$ref").(string)
		if !ok {
			return v, nil
		}
		t, err := c.pointer(ref)
		if err != nil {
			return nil, err
		}
		v = t
	}
	return nil, errors.New("$ref chain too long")
}

// pointer resolves a local JSON pointer such as #/components/schemas/Foo.
func (c *compiler) pointer(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, fmt.Errorf("$ref %q: only local references (#/...) are supported", ref)
	}
	v := c.doc
	frag := strings.TrimPrefix(ref, "#")
	if frag == "" {
		return v, nil
	}
	if !strings.HasPrefix(frag, "/") {
		return nil, fmt.Errorf("$ref %q: not a JSON pointer", ref)
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		o, ok := v.(*object)
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		nv, ok := o.vals[tok]
		if !ok {
			return nil, fmt.Errorf("$ref %q does not resolve", ref)
		}
		v = nv
	}
	return v, nil
}
