package schema

import (
	"encoding/json"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// number is a numeric schema literal (a bound, a multipleOf, a scalar enum
// or const): its float64 for the usual comparison, and its text for the
// exact one. float64 rounding keeps order, so a float comparison that is
// not a tie is already the exact answer; only ties (two literals that
// round to one float64, such as 2^64-1 and 2^64) are settled on the text.
type number struct {
	f   float64
	lit string
}

func numberOf(n json.Number) (number, bool) {
	f, err := n.Float64()
	if err != nil && !math.IsInf(f, 0) {
		return number{}, false
	}
	return number{f: f, lit: n.String()}, true
}

// maxExactLen bounds the literals compared exactly: a longer one (or one
// with a large exponent) is left to its float64, which costs nothing to
// compare, where the exact value could take a long time to build.
const maxExactLen = 400

// exact is s as an exact rational, when it is small enough to build.
func exact(s string) (*big.Rat, bool) {
	if s == "" || len(s) > maxExactLen {
		return nil, false
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(strings.TrimPrefix(s[i+1:], "+"))
		if err != nil || e > maxExactLen || e < -maxExactLen {
			return nil, false
		}
	}
	return new(big.Rat).SetString(s)
}

// exactOf is a body value's exact value: a json.Number's text, or a
// float64 or integer as it is.
func exactOf(val any) (*big.Rat, bool) {
	switch t := val.(type) {
	case json.Number:
		return exact(t.String())
	case float64:
		if math.IsInf(t, 0) || math.IsNaN(t) {
			return nil, false
		}
		return new(big.Rat).SetFloat64(t), true
	case int:
		return new(big.Rat).SetInt64(int64(t)), true
	case int64:
		return new(big.Rat).SetInt64(t), true
	}
	return nil, false
}

// cmp compares val (whose float64 is f) with n: -1, 0 or +1. A tie that
// cannot be settled exactly (an infinity, a literal too large to build)
// is 0.
func (n number) cmp(f float64, val any) int {
	switch {
	case f < n.f:
		return -1
	case f > n.f:
		return 1
	}
	if math.Abs(f) < 1<<53 && integerLit(n.lit) {
		if v, isNum := val.(json.Number); !isNum || integerLit(v.String()) {
			return 0 // integers below 2^53 are exact in a float64 (the usual tie: a value at its bound)
		}
	}
	x, ok := exactOf(val)
	if !ok {
		return 0
	}
	y, ok := exact(n.lit)
	if !ok {
		return 0
	}
	return x.Cmp(y)
}

// multipleOf reports whether val (whose float64 is f) is an integer
// multiple of n, exactly when both can be built, else by their float64s.
func (n number) multipleOf(f float64, val any) bool {
	if n.f == 0 {
		return true // not a valid multipleOf; the compiler refuses it
	}
	x, okX := exactOf(val)
	y, okY := exact(n.lit)
	if okX && okY {
		return new(big.Rat).Quo(x, y).IsInt()
	}
	q := f / n.f
	return !math.IsInf(q, 0) && q == math.Trunc(q)
}

// integerLit reports a literal written as an integer (digits, an optional
// minus): one whose float64 may not show it, past 2^53.
func integerLit(s string) bool {
	s = strings.TrimPrefix(s, "-")
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// text is n as a message shows it: an integer as written, else as
// numText shows its float64.
func (n number) text() string {
	if integerLit(n.lit) && math.Abs(n.f) >= 1e15 {
		return n.lit
	}
	return numText(n.f)
}

// ctx is n as a detail's ctx holds it: an integer exactly (a json.Number
// past 2^53), else as numCtx gives its float64.
func (n number) ctx() any {
	if integerLit(n.lit) && math.Abs(n.f) >= 1e15 {
		return json.Number(n.lit)
	}
	return numCtx(n.f)
}
