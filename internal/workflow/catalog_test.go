package workflow

import (
	"math/big"
	"os"
	"testing"
)

func loadCatalog(t testing.TB) Catalog {
	t.Helper()
	data, err := os.ReadFile("testdata/object_info.json")
	if err != nil {
		t.Fatal(err)
	}
	cat, err := ParseObjectInfo(data)
	if err != nil {
		t.Fatal(err)
	}
	return cat
}

func TestParseObjectInfo(t *testing.T) {
	cat := loadCatalog(t)
	if len(cat) != 7 {
		t.Fatalf("classes = %d, want 7", len(cat))
	}
	tests := []struct {
		class, input string
		wantType     string
		wantRequired bool
		wantChoices  int // -1: nil
		wantMin      string
		wantMax      string
	}{
		{"LoadImage", "image", TypeCombo, true, 2, "", ""},
		{"ImageScale", "upscale_method", TypeCombo, true, 5, "", ""},
		{"ImageScale", "crop", TypeCombo, true, 2, "", ""},
		{"ImageScale", "width", "INT", true, -1, "0", "16384"},
		{"KSampler", "seed", "INT", true, -1, "0", "18446744073709551615"},
		{"KSampler", "cfg", "FLOAT", true, -1, "0", "100"},
		{"SaveImage", "filename_prefix", "STRING", true, -1, "", ""},
		{"PreviewAny", "source", "*", true, -1, "", ""},
		{"PrimitiveAny", "mask", "IMAGE,MASK", false, -1, "", ""},
		{"PrimitiveAny", "scale", "FLOAT", false, -1, "-1.5", "2.5"},
		{"PrimitiveAny", "flag", "BOOLEAN", true, -1, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.class+"."+tc.input, func(t *testing.T) {
			spec, required, ok := cat[tc.class].Input(tc.input)
			if !ok {
				t.Fatal("input not found")
			}
			if spec.Type != tc.wantType || required != tc.wantRequired {
				t.Errorf("type %q required %v, want %q %v", spec.Type, required, tc.wantType, tc.wantRequired)
			}
			if got := len(spec.Choices); (tc.wantChoices == -1) != (spec.Choices == nil) || (tc.wantChoices >= 0 && got != tc.wantChoices) {
				t.Errorf("choices = %v, want %d", spec.Choices, tc.wantChoices)
			}
			checkBound(t, "min", spec.Min, tc.wantMin)
			checkBound(t, "max", spec.Max, tc.wantMax)
		})
	}
	// Declaration order is the document's, not the map's.
	var order []string
	for _, s := range cat["KSampler"].Required {
		order = append(order, s.Name)
	}
	want := []string{"model", "seed", "steps", "cfg", "sampler_name", "scheduler", "positive", "negative", "latent_image", "denoise"}
	if len(order) != len(want) {
		t.Fatalf("order = %v", order)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order = %v, want %v", order, want)
		}
	}
	if !cat["SaveImage"].OutputNode || cat["ImageInvert"].OutputNode {
		t.Error("output_node not kept")
	}
	if got := cat["LoadImage"].Outputs; len(got) != 2 || got[0] != "IMAGE" || got[1] != "MASK" {
		t.Errorf("LoadImage outputs = %v", got)
	}
	if _, _, ok := cat["SaveImage"].Input("prompt"); ok {
		t.Error("hidden inputs must not be declared inputs")
	}
	if spec, _, _ := cat["LoadImage"].Input("image"); !spec.Upload() || !spec.HasChoice("cat.png") || spec.HasChoice("dog.png") {
		t.Error("LoadImage.image should be an upload combo holding cat.png only")
	}
	if spec, _, _ := cat["ImageScale"].Input("upscale_method"); spec.Upload() {
		t.Error("upscale_method is not an upload combo")
	}
}

func checkBound(t *testing.T, name string, got *big.Float, want string) {
	t.Helper()
	if want == "" {
		if got != nil {
			t.Errorf("%s = %v, want none", name, got)
		}
		return
	}
	w, _ := parseNumber(want)
	if got == nil || got.Cmp(w) != 0 {
		t.Errorf("%s = %v, want %s", name, got, want)
	}
}

func TestParseObjectInfoTolerance(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		wantErr bool
	}{
		{"not json", `{`, true},
		{"not an object", `[]`, true},
		{"class not an object", `{"A": 5}`, true},
		{"odd spec becomes any", `{"A": {"input": {"required": {"x": 5, "y": []}}, "output": [["a","b"]], "output_node": true}}`, false},
		{"empty combo list", `{"A": {"input": {"required": {"x": [[]]}}, "output": []}}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cat, err := ParseObjectInfo([]byte(tc.doc))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			a := cat["A"]
			if len(a.Required) > 0 && a.Required[0].Name == "x" && tc.name == "odd spec becomes any" {
				if a.Required[0].Type != "*" || a.Required[1].Type != "*" || a.Outputs[0] != TypeCombo {
					t.Errorf("got %+v", a)
				}
			}
			if tc.name == "empty combo list" && (a.Required[0].Choices == nil || len(a.Required[0].Choices) != 0) {
				t.Errorf("an empty list must stay an empty, non-nil list: %#v", a.Required[0].Choices)
			}
		})
	}
}
