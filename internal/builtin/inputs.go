package builtin

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// nodeCall is one node's invocation: its resolved inputs and the run it
// belongs to. Accessors return errors phrased like ComfyUI's validation
// messages, because the executor may receive prompts that no validator saw.
type nodeCall struct {
	ctx  context.Context
	run  *run
	id   string
	def  *nodeDef
	node Node
	// charged is what the node has charged to the run's memory so far.
	charged int64
}

// charge accounts n bytes the node is about to allocate (see memory).
func (c *nodeCall) charge(n int64) error {
	if err := c.run.mem.charge(n); err != nil {
		return err
	}
	c.charged += n
	return nil
}

// release accounts n bytes the node has let go of.
func (c *nodeCall) release(n int64) {
	c.run.mem.release(n)
	c.charged -= n
}

// raw returns an input's value with links resolved to the producing node's
// output and ComfyUI's {"__value__": x} wrapper removed.
func (c *nodeCall) raw(name string) (any, error) {
	v, ok := c.node.Inputs[name]
	if !ok || v == nil {
		//lint:ignore ST1005 ComfyUI's own message, word for word: clients match it
		return nil, fmt.Errorf("Required input is missing: %s", name)
	}
	src, slot, isLink, err := parseLink(v)
	if err != nil {
		return nil, fmt.Errorf("input %s: %w", name, err)
	}
	if isLink {
		outs, ok := c.run.results[src]
		if !ok {
			return nil, fmt.Errorf("input %s: node %s has not produced outputs", name, src)
		}
		if slot >= len(outs) {
			return nil, fmt.Errorf("input %s: node %s has no output slot %d", name, src, slot)
		}
		return outs[slot], nil
	}
	if m, ok := v.(map[string]any); ok {
		if inner, ok := m["__value__"]; ok {
			return inner, nil
		}
	}
	return v, nil
}

func (c *nodeCall) spec(name string) inputDef {
	for _, in := range c.def.required {
		if in.name == name {
			return in
		}
	}
	panic("builtin: node " + c.def.name + " reads undeclared input " + name)
}

func (c *nodeCall) image(name string) (*Image, error) {
	v, err := c.raw(name)
	if err != nil {
		return nil, err
	}
	im, ok := v.(*Image)
	if !ok || im == nil {
		return nil, fmt.Errorf("input %s: received %s, expected IMAGE", name, typeName(v))
	}
	return im, nil
}

func typeName(v any) string {
	switch v.(type) {
	case *Image:
		return "IMAGE"
	case *Mask:
		return "MASK"
	case string:
		return "STRING"
	case float64, int:
		return "number"
	}
	return fmt.Sprintf("%T", v)
}

// number converts a widget value the way ComfyUI's int()/float() coercion
// would accept it: numbers, numeric strings and booleans.
func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case bool:
		if x {
			return 1, true
		}
		return 0, true
	case string:
		f, err := strconv.ParseFloat(x, 64)
		return f, err == nil
	}
	return 0, false
}

func (c *nodeCall) checkRange(in inputDef, f float64) error {
	if !in.ranged {
		return nil
	}
	if f < in.min {
		return fmt.Errorf("%s: Value %v smaller than min of %v", in.name, f, in.min)
	}
	if f > in.max {
		return fmt.Errorf("%s: Value %v bigger than max of %v", in.name, f, in.max)
	}
	return nil
}

// intValue reads an INT widget: like Python's int(), a float truncates
// toward zero; out-of-range values are refused.
func (c *nodeCall) intValue(name string) (int, error) {
	v, err := c.raw(name)
	if err != nil {
		return 0, err
	}
	f, ok := number(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: Failed to convert an input value to a INT value", name)
	}
	f = math.Trunc(f)
	if err := c.checkRange(c.spec(name), f); err != nil {
		return 0, err
	}
	if math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("%s: Value %v out of range", name, f)
	}
	return int(f), nil
}

// intValues reads INT widgets in order, stopping at the first error.
func (c *nodeCall) intValues(names ...string) ([]int, error) {
	v := make([]int, len(names))
	for i, name := range names {
		var err error
		if v[i], err = c.intValue(name); err != nil {
			return nil, err
		}
	}
	return v, nil
}

func (c *nodeCall) floatValue(name string) (float64, error) {
	v, err := c.raw(name)
	if err != nil {
		return 0, err
	}
	f, ok := number(v)
	if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, fmt.Errorf("%s: Failed to convert an input value to a FLOAT value", name)
	}
	if err := c.checkRange(c.spec(name), f); err != nil {
		return 0, err
	}
	return f, nil
}

// stringValue reads a STRING widget; numbers and booleans are formatted as
// Python's str() would.
func (c *nodeCall) stringValue(name string) (string, error) {
	v, err := c.raw(name)
	if err != nil {
		return "", err
	}
	switch x := v.(type) {
	case string:
		return x, nil
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10), nil
		}
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case bool:
		if x {
			return "True", nil
		}
		return "False", nil
	}
	return "", fmt.Errorf("%s: Failed to convert an input value to a STRING value", name)
}

// comboValue reads a combo widget and checks membership (value_not_in_list).
func (c *nodeCall) comboValue(name string) (string, error) {
	v, err := c.raw(name)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	in := c.spec(name)
	if !ok || !slices.Contains(in.options, s) {
		//lint:ignore ST1005 ComfyUI's own message, word for word: clients match it
		return "", fmt.Errorf("Value not in list: %s: '%v' not in %q", name, v, in.options)
	}
	return s, nil
}
