package workflow

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// The integer fast path of checkNumber must order a value against a bound
// exactly as big.Float does.
func TestCmpIntFloatMatchesBigFloat(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	bounds := []string{"0", "-0", "1", "-1", "0.5", "-0.5", "7.999", "-7.999", "8", "-8",
		"9223372036854775807", "9223372036854775808", "1e30", "-9223372036854775808",
		"-9223372036854775809", "-1e30", "18446744073709551615", "4294967295.5"}
	for range 200 {
		bounds = append(bounds, fmt.Sprintf("%.3f", (rng.Float64()-0.5)*2e6), fmt.Sprint(rng.Int64N(2e6)-1e6))
	}
	values := []int64{0, 1, -1, 7, 8, 9, -7, -8, -9, math.MaxInt64, math.MinInt64, 4294967295, 4294967296}
	for range 200 {
		values = append(values, rng.Int64N(2e6)-1e6)
	}
	for _, bs := range bounds {
		b, ok := parseNumber(bs)
		if !ok {
			t.Fatalf("bound %s", bs)
		}
		for _, v := range values {
			want := new(big.Float).SetInt64(v).Cmp(b)
			if got := cmpIntFloat(v, b); got != want {
				t.Fatalf("cmpIntFloat(%d, %s) = %d, big.Float says %d", v, bs, got, want)
			}
		}
	}
}

// smallInt takes exactly the integer literals it can hold and leaves
// everything else to parseNumber.
func TestSmallInt(t *testing.T) {
	for raw, want := range map[string]int64{"0": 0, "-0": 0, "8": 8, "-12": -12,
		"999999999999999999": 999999999999999999, "-999999999999999999": -999999999999999999} {
		if got, ok := smallInt([]byte(raw)); !ok || got != want {
			t.Errorf("smallInt(%s) = %d, %v; want %d", raw, got, ok, want)
		}
	}
	for _, raw := range []string{"", "-", "1.0", "1e3", "01", "-01", "1000000000000000000", "+1", "1 ", `"1"`, "true"} {
		if _, ok := smallInt([]byte(raw)); ok {
			t.Errorf("smallInt(%q) accepted", raw)
		}
	}
}
