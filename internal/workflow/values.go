package workflow

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"math/big"
	"strings"
)

// numberPrec is wide enough to hold any uint64 seed exactly and compare
// decimal bounds without float64 rounding surprises.
const numberPrec = 128

// parseNumber reads a JSON number exactly enough for range checks. Number
// literals are capped at maxNumberBytes by the scan, and big.Float keeps a
// fixed precision, so even "1e999999999" costs nothing.
func parseNumber(s string) (*big.Float, bool) {
	f, _, err := big.ParseFloat(s, 10, numberPrec, big.ToNearestEven)
	if err != nil || f.IsInf() {
		return nil, false
	}
	return f, true
}

// linkOnlyTypes are core types that only a link can supply; a literal for
// them would fail at execution, so it is refused now. Unknown custom types
// are accepted as literals, as ComfyUI does.
var linkOnlyTypes = map[string]bool{
	"IMAGE": true, "MASK": true, "LATENT": true, "MODEL": true, "CLIP": true,
	"VAE": true, "CONDITIONING": true, "CLIP_VISION": true, "CLIP_VISION_OUTPUT": true,
	"CONTROL_NET": true, "STYLE_MODEL": true, "GLIGEN": true, "UPSCALE_MODEL": true,
	"NOISE": true, "SAMPLER": true, "SIGMAS": true, "GUIDER": true, "AUDIO": true, "VIDEO": true,
}

// checkWidget validates a literal value against its input spec and records
// every problem on ne. It mirrors ComfyUI's validate_inputs but does not
// coerce: "5" is not an INT and 1 is not a STRING, because a gateway that
// accepts what ComfyUI would silently convert cannot promise the built-in
// executor behaves the same.
func checkWidget(ne NodeErrors, node string, spec InputSpec, raw json.RawMessage) {
	raw = bytes.TrimSpace(raw)
	if isAssetObject(raw) {
		ne.add(node, spec.Name, ReasonUnresolvedAssetRef,
			"the asset reference in input %q was not resolved", spec.Name)
		return
	}
	switch spec.Type {
	case "INT", "FLOAT":
		checkNumber(ne, node, spec, raw)
	case "STRING":
		if isPlainString(raw) { // no string allocated just to drop it
			return
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			ne.add(node, spec.Name, ReasonInvalidInputType, "Failed to convert an input value to a STRING value")
		}
	case "BOOLEAN":
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			ne.add(node, spec.Name, ReasonInvalidInputType, "Failed to convert an input value to a BOOLEAN value")
		}
	case TypeCombo:
		checkCombo(ne, node, spec, raw)
	default:
		if isLinkOnly(spec.Type) {
			ne.add(node, spec.Name, ReasonInvalidInputType,
				"input %q takes a link to a %s output, not a literal value", spec.Name, spec.Type)
		}
	}
}

func isLinkOnly(typ string) bool {
	for _, t := range strings.Split(typ, ",") {
		if !linkOnlyTypes[strings.TrimSpace(t)] {
			return false
		}
	}
	return true
}

func checkNumber(ne NodeErrors, node string, spec InputSpec, raw json.RawMessage) {
	if len(raw) == 0 || !(raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')) {
		ne.add(node, spec.Name, ReasonInvalidInputType, "Failed to convert an input value to a %s value", spec.Type)
		return
	}
	if n, ok := smallInt(raw); ok {
		// The usual integer literal, compared without a big.Float of its
		// own (parsing one costs several allocations per value).
		if spec.Min != nil && cmpIntFloat(n, spec.Min) < 0 {
			ne.add(node, spec.Name, ReasonValueSmallerThanMin, "Value %s smaller than min of %s", raw, spec.Min.Text('g', -1))
		}
		if spec.Max != nil && cmpIntFloat(n, spec.Max) > 0 {
			ne.add(node, spec.Name, ReasonValueBiggerThanMax, "Value %s bigger than max of %s", raw, spec.Max.Text('g', -1))
		}
		return
	}
	v, ok := parseNumber(string(raw))
	if !ok || (spec.Type == "INT" && !v.IsInt()) {
		ne.add(node, spec.Name, ReasonInvalidInputType, "Failed to convert an input value to a %s value", spec.Type)
		return
	}
	if spec.Min != nil && v.Cmp(spec.Min) < 0 {
		ne.add(node, spec.Name, ReasonValueSmallerThanMin, "Value %s smaller than min of %s", raw, spec.Min.Text('g', -1))
	}
	if spec.Max != nil && v.Cmp(spec.Max) > 0 {
		ne.add(node, spec.Name, ReasonValueBiggerThanMax, "Value %s bigger than max of %s", raw, spec.Max.Text('g', -1))
	}
}

// smallInt reads raw when it is a plain JSON integer (optional minus,
// at most 18 digits: no fraction or exponent), which always fits an int64.
func smallInt(raw []byte) (int64, bool) {
	digits := raw
	if len(digits) > 0 && digits[0] == '-' {
		digits = digits[1:]
	}
	if len(digits) == 0 || len(digits) > 18 || (digits[0] == '0' && len(digits) > 1) {
		return 0, false
	}
	var n int64
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if len(digits) < len(raw) {
		n = -n
	}
	return n, true
}

// cmpIntFloat compares v with b (-1, 0, +1) exactly, without allocating.
// b.Int64 truncates toward zero and tells on which side of b its result
// lies; no integer lies strictly between b and that result (outside the
// int64 range the result is the range's end, beyond which v cannot be).
func cmpIntFloat(v int64, b *big.Float) int {
	bi, acc := b.Int64()
	switch acc {
	case big.Exact:
		return cmp.Compare(v, bi)
	case big.Above: // b < bi
		if v < bi {
			return -1
		}
		return 1
	default: // big.Below: bi < b
		if v <= bi {
			return -1
		}
		return 1
	}
}

func checkCombo(ne NodeErrors, node string, spec InputSpec, raw json.RawMessage) {
	if spec.Choices == nil {
		return // the catalog gave no list (for example a remote combo)
	}
	if s, ok := plainString(raw); ok { // the usual case, without a decoder
		if !spec.HasChoice(s) {
			ne.add(node, spec.Name, ReasonValueNotInList, "Value not in list: %s: %s not in %s", spec.Name, quote(s), describeChoices(spec.Choices))
		}
		return
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if dec.Decode(&v) != nil {
		ne.add(node, spec.Name, ReasonInvalidInputType, "Failed to read the value of input %q", spec.Name)
		return
	}
	for _, c := range spec.Choices {
		if sameChoice(v, c) {
			return
		}
	}
	shown := string(raw)
	if s, ok := v.(string); ok {
		shown = quote(s)
	} else if len(shown) > 80 {
		shown = shown[:80] + "…"
	}
	ne.add(node, spec.Name, ReasonValueNotInList, "Value not in list: %s: %s not in %s", spec.Name, shown, describeChoices(spec.Choices))
}

func sameChoice(v, c any) bool {
	switch cv := c.(type) {
	case string:
		s, ok := v.(string)
		return ok && s == cv
	case bool:
		b, ok := v.(bool)
		return ok && b == cv
	case json.Number:
		n, ok := v.(json.Number)
		if !ok {
			return false
		}
		a, ok1 := parseNumber(string(n))
		b, ok2 := parseNumber(string(cv))
		return ok1 && ok2 && a.Cmp(b) == 0
	}
	return false
}

// describeChoices lists short combos and only counts long ones, as ComfyUI
// does past 20 entries.
func describeChoices(choices []any) string {
	if len(choices) > 20 {
		return fmt.Sprintf("(list of length %d)", len(choices))
	}
	parts := make([]string, len(choices))
	for i, c := range choices {
		if s, ok := c.(string); ok {
			parts[i] = quote(s)
		} else {
			parts[i] = fmt.Sprint(c)
		}
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// typesMatch is ComfyUI's validate_node_input (non-strict): equal types,
// "*" on either side, or overlapping comma-separated unions.
func typesMatch(output, input string) bool {
	if output == input || output == "*" || input == "*" {
		return true
	}
	if !strings.Contains(output, ",") && !strings.Contains(input, ",") {
		return false
	}
	for _, o := range strings.Split(output, ",") {
		o = strings.TrimSpace(o)
		for _, i := range strings.Split(input, ",") {
			i = strings.TrimSpace(i)
			if o == i || o == "*" || i == "*" {
				return true
			}
		}
	}
	return false
}
