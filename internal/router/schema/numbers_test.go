package schema

import (
	"encoding/json"
	"testing"
)

// TestExactNumbers: bounds, enums, consts and multipleOf compare numbers
// exactly, not as float64 (the router review forwarded 2^64 against a
// maximum of 2^64-1, and multipleOf was not checked at all), and the
// details show integer bounds as written.
func TestExactNumbers(t *testing.T) {
	tests := []struct {
		name, schema, value string
		wantType            string // "" for valid
		wantMsg, wantCtx    string
	}{
		{"above a 2^64-1 maximum", `{"type":"integer","maximum":18446744073709551615}`, "18446744073709551616",
			"less_than_equal", "Input should be less than or equal to 18446744073709551615", `{"le":18446744073709551615}`},
		{"at a 2^64-1 maximum", `{"type":"integer","maximum":18446744073709551615}`, "18446744073709551615", "", "", ""},
		{"below a 2^64-1 minimum", `{"type":"integer","minimum":18446744073709551615}`, "18446744073709551614",
			"greater_than_equal", "Input should be greater than or equal to 18446744073709551615", `{"ge":18446744073709551615}`},
		{"past 2^53 exclusive", `{"type":"integer","exclusiveMaximum":9007199254740993}`, "9007199254740993",
			"less_than", "Input should be less than 9007199254740993", `{"lt":9007199254740993}`},
		{"under 2^53 exclusive", `{"type":"integer","exclusiveMaximum":9007199254740993}`, "9007199254740992", "", "", ""},
		{"decimal tie", `{"type":"number","maximum":0.1}`, "0.1000000000000000000001", "less_than_equal", "Input should be less than or equal to 0.1", `{"le":0.1}`},
		{"at a small bound", `{"type":"integer","minimum":1,"maximum":4}`, "4", "", "", ""},
		{"just past a small bound", `{"type":"number","maximum":4}`, "4.0000000000000000001", "less_than_equal", "Input should be less than or equal to 4", `{"le":4}`},
		{"small bounds unchanged", `{"type":"integer","minimum":1,"maximum":4}`, "5", "less_than_equal", "Input should be less than or equal to 4", `{"le":4}`},
		{"const past 2^53", `{"const":18446744073709551615}`, "18446744073709551616", "literal_error", "Input should be 18446744073709551615", ""},
		{"const equal", `{"const":18446744073709551615}`, "18446744073709551615", "", "", ""},
		{"enum past 2^53", `{"enum":[9007199254740993]}`, "9007199254740992", "enum", "Input should be 9007199254740993", ""},
		{"enum equal", `{"enum":[9007199254740993, 1]}`, "9007199254740993", "", "", ""},
		{"multiple of 32", `{"type":"integer","multipleOf":32}`, "1024", "", "", ""},
		{"not a multiple of 32", `{"type":"integer","multipleOf":32}`, "1000", "multiple_of", "Input should be a multiple of 32", `{"multiple_of":32}`},
		{"not a multiple of 3 past 2^53", `{"type":"integer","multipleOf":3}`, "9007199254740995", "multiple_of", "Input should be a multiple of 3", `{"multiple_of":3}`},
		{"not a multiple of 3 past 2^64", `{"type":"integer","multipleOf":3}`, "18446744073709551617", "multiple_of", "Input should be a multiple of 3", `{"multiple_of":3}`},
		{"a decimal multiple", `{"type":"number","multipleOf":0.1}`, "0.3", "", "", ""},
		{"huge exponent left to float64", `{"type":"number","maximum":1e300}`, "1e99999", "less_than_equal", "Input should be less than or equal to 1e+300", `{"le":1e+300}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := Compile([]byte(`{"components":{"schemas":{"Input":{"type":"object","properties":{"n":` + tc.schema + `}}}}}`))
			if err != nil {
				t.Fatal(err)
			}
			d, err := v.ValidateJSON([]byte(`{"n":` + tc.value + `}`))
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantType == "" {
				if len(d) != 0 {
					t.Fatalf("n = %s: %+v, want valid", tc.value, d)
				}
				return
			}
			if len(d) != 1 || d[0].Type != tc.wantType || d[0].Msg != tc.wantMsg {
				t.Fatalf("n = %s: %+v, want one %s %q", tc.value, d, tc.wantType, tc.wantMsg)
			}
			if tc.wantCtx != "" {
				if got, _ := json.Marshal(d[0].Ctx); string(got) != tc.wantCtx {
					t.Errorf("ctx %s, want %s", got, tc.wantCtx)
				}
			}
		})
	}
	for _, bad := range []string{`{"multipleOf":0}`, `{"multipleOf":-2}`, `{"multipleOf":"2"}`} {
		if _, err := Compile([]byte(`{"components":{"schemas":{"Input":{"type":"object","properties":{"n":` + bad + `}}}}}`)); err == nil {
			t.Errorf("%s compiled", bad)
		}
	}
}
