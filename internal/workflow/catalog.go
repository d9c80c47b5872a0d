package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// Catalog is a pool's node catalog keyed by class_type. It is parsed from
// ComfyUI's own GET /object_info answer so that the built-in executor (which
// publishes the same shape) and ComfyUI workers share one validator.
type Catalog map[string]NodeClass

// NodeClass keeps only what validation needs from one /object_info entry.
type NodeClass struct {
	Name string
	// Required and Optional keep the inputs in declaration order.
	Required []InputSpec
	Optional []InputSpec
	// Outputs are the output slot types; a combo output is "COMBO".
	Outputs []string
	// OutputNode marks classes the executor runs as graph roots.
	OutputNode bool
}

// Input returns the spec of the named input and whether it is required.
func (c NodeClass) Input(name string) (spec InputSpec, required, ok bool) {
	for _, s := range c.Required {
		if s.Name == name {
			return s, true, true
		}
	}
	for _, s := range c.Optional {
		if s.Name == name {
			return s, false, true
		}
	}
	return InputSpec{}, false, false
}

// TypeCombo is the Type of every combo input, whichever /object_info form
// declared it (legacy `[[choices], {…}]` or v3 `["COMBO", {"options": […]}]`).
const TypeCombo = "COMBO"

// InputSpec is one declared input.
type InputSpec struct {
	Name string
	// Type is ComfyUI's type string ("IMAGE", "INT", "*", "IMAGE,MASK", …)
	// or TypeCombo.
	Type string
	// Choices are a combo's allowed values (strings, json.Number or bool).
	// Nil means the catalog gave no list, so membership is not checked.
	Choices []any
	// Options is the raw options object (default, min, max, step, multiline,
	// image_upload, …); nil when absent.
	Options map[string]json.RawMessage
	// Min and Max are the numeric bounds from Options, nil when absent.
	Min, Max *big.Float
}

// IsCombo reports whether the input takes one value out of a list.
func (s InputSpec) IsCombo() bool { return s.Type == TypeCombo }

// Upload reports whether the combo is a file picker fed by uploads
// (`image_upload`, `video_upload`, `audio_upload`, … set to true), which is
// where ComfyUI clients place input file names.
func (s InputSpec) Upload() bool {
	for k, v := range s.Options {
		if len(k) > len("_upload") && k[len(k)-len("_upload"):] == "_upload" && bytes.Equal(bytes.TrimSpace(v), []byte("true")) {
			return true
		}
	}
	return false
}

// HasChoice reports whether v is one of the combo's choices. It is false when
// the list is unknown.
func (s InputSpec) HasChoice(v string) bool {
	for _, c := range s.Choices {
		if cs, ok := c.(string); ok && cs == v {
			return true
		}
	}
	return false
}

// ParseObjectInfo reads a GET /object_info answer. It is tolerant of custom
// nodes whose input specs it cannot interpret (they become "*", accepting any
// value) because one odd node must not make a whole worker pool unusable; it
// fails only when the document's overall shape is wrong.
func ParseObjectInfo(data []byte) (Catalog, error) {
	var classes map[string]json.RawMessage
	if err := json.Unmarshal(data, &classes); err != nil {
		return nil, fmt.Errorf("object_info: %w", err)
	}
	cat := make(Catalog, len(classes))
	for name, raw := range classes {
		nc, err := parseNodeClass(name, raw)
		if err != nil {
			return nil, fmt.Errorf("object_info: class %q: %w", name, err)
		}
		cat[name] = nc
	}
	return cat, nil
}

type rawNodeClass struct {
	Input struct {
		Required json.RawMessage `json:"required"`
		Optional json.RawMessage `json:"optional"`
	} `json:"input"`
	Output     []json.RawMessage `json:"output"`
	OutputNode bool              `json:"output_node"`
}

func parseNodeClass(name string, raw json.RawMessage) (NodeClass, error) {
	var rc rawNodeClass
	if err := json.Unmarshal(raw, &rc); err != nil {
		return NodeClass{}, err
	}
	nc := NodeClass{Name: name, OutputNode: rc.OutputNode}
	var err error
	if nc.Required, err = parseInputGroup(rc.Input.Required); err != nil {
		return NodeClass{}, fmt.Errorf("required inputs: %w", err)
	}
	if nc.Optional, err = parseInputGroup(rc.Input.Optional); err != nil {
		return NodeClass{}, fmt.Errorf("optional inputs: %w", err)
	}
	for _, o := range rc.Output {
		var s string
		if json.Unmarshal(o, &s) == nil {
			nc.Outputs = append(nc.Outputs, s)
			continue
		}
		// A list output is a combo handed to a combo input (legacy form).
		nc.Outputs = append(nc.Outputs, TypeCombo)
	}
	return nc, nil
}

// parseInputGroup reads {"name": spec, …} keeping the document's key order,
// which is ComfyUI's declaration order (input_order says the same).
func parseInputGroup(raw json.RawMessage) ([]InputSpec, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not an object")
	}
	var specs []InputSpec
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		name, _ := tok.(string)
		var spec json.RawMessage
		if err := dec.Decode(&spec); err != nil {
			return nil, err
		}
		specs = append(specs, parseInputSpec(name, spec))
	}
	return specs, nil
}

func parseInputSpec(name string, raw json.RawMessage) InputSpec {
	spec := InputSpec{Name: name, Type: "*"}
	var parts []json.RawMessage
	if json.Unmarshal(raw, &parts) != nil || len(parts) == 0 {
		return spec
	}
	if len(parts) > 1 {
		var opts map[string]json.RawMessage
		if json.Unmarshal(parts[1], &opts) == nil {
			spec.Options = opts
		}
	}
	var typ string
	switch {
	case json.Unmarshal(parts[0], &typ) == nil:
		spec.Type = typ
		if typ == TypeCombo {
			if o, ok := spec.Options["options"]; ok {
				spec.Choices = decodeChoices(o)
			}
		}
	default:
		spec.Type = TypeCombo
		spec.Choices = decodeChoices(parts[0])
	}
	spec.Min = optionNumber(spec.Options, "min")
	spec.Max = optionNumber(spec.Options, "max")
	return spec
}

// decodeChoices returns the combo list, never nil for a list (an empty list
// means nothing is allowed), or nil when raw is not a list.
func decodeChoices(raw json.RawMessage) []any {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var list []any
	if dec.Decode(&list) != nil || list == nil {
		return nil
	}
	return list
}

func optionNumber(opts map[string]json.RawMessage, key string) *big.Float {
	raw, ok := opts[key]
	if !ok {
		return nil
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return nil
	}
	f, ok := parseNumber(string(n))
	if !ok {
		return nil
	}
	return f
}
