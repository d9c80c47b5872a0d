package workflow

import (
	"net/http"
	"testing"
)

func TestAssetRefs(t *testing.T) {
	cat := loadCatalog(t)
	g := graphOf(t, `{
		"1": {"class_type": "LoadImage", "inputs": {"image": {"__type": "core/ASSET", "info": {"id": "a-1", "hash": "blake3:00", "file_path": "cat.png"}}}},
		"2": {"class_type": "LoadImage", "inputs": {"image": "photo.png"}},
		"3": {"class_type": "ImageScale", "inputs": {"image": ["2", 0], "upscale_method": "bilinear", "width": 5, "height": 5, "crop": ""}},
		"4": {"class_type": "SaveImage", "inputs": {"images": ["3", 0], "filename_prefix": "photo.png"}},
		"5": {"class_type": "CustomLoader", "inputs": {"file": "other.png", "asset": {"__type": "core/ASSET", "info": {"id": "a-2"}}}}
	}`)
	refs, err := AssetRefs(g, cat)
	if err != nil {
		t.Fatal(err)
	}
	want := []AssetRef{
		{Node: "1", Input: "image", AssetID: "a-1", Hash: "blake3:00", FilePath: "cat.png"},
		{Node: "2", Input: "image", FileName: "photo.png", Upload: true},
		{Node: "3", Input: "upscale_method", FileName: "bilinear"},
		{Node: "5", Input: "asset", AssetID: "a-2"},
	}
	if len(refs) != len(want) {
		t.Fatalf("refs = %+v, want %+v", refs, want)
	}
	for i := range want {
		if refs[i] != want[i] {
			t.Errorf("refs[%d] = %+v, want %+v", i, refs[i], want[i])
		}
	}
	if !refs[0].IsObject() || refs[1].IsObject() {
		t.Error("IsObject wrong")
	}
}

func TestAssetRefsMalformed(t *testing.T) {
	cat := loadCatalog(t)
	tests := []struct {
		name  string
		value string
	}{
		{"no info", `{"__type": "core/ASSET"}`},
		{"info not an object", `{"__type": "core/ASSET", "info": "a-1"}`},
		{"no id", `{"__type": "core/ASSET", "info": {"hash": "blake3:00"}}`},
		{"id not a string", `{"__type": "core/ASSET", "info": {"id": 12}}`},
		{"empty id", `{"__type": "core/ASSET", "info": {"id": ""}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := graphOf(t, `{"1": {"class_type": "LoadImage", "inputs": {"image": `+tc.value+`}},
				"2": {"class_type": "SaveImage", "inputs": {"images": ["1", 0], "filename_prefix": "x"}}}`)
			refs, err := AssetRefs(g, cat)
			if refs != nil {
				t.Errorf("refs = %+v", refs)
			}
			ae := wantAPIError(t, err, http.StatusUnprocessableEntity, "missing_asset")
			if !hasFieldError(nodeErrorsOf(t, ae), "1", "image", ReasonMalformedAssetRef) {
				t.Errorf("details = %+v", ae.Details)
			}
		})
	}
}
