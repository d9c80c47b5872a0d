package jobs

import (
	"context"
	"maps"
	"slices"
	"testing"

	"github.com/comfygate/comfygate/internal/workflow"
	"github.com/comfygate/comfygate/storage"
)

// countingStore counts the file-name lookups resolveAssets makes.
type countingStore struct {
	Store
	finds []string
}

func (c *countingStore) FindAssetByPath(ctx context.Context, account, filePath string) (storage.Asset, error) {
	c.finds = append(c.finds, filePath)
	return c.Store.FindAssetByPath(ctx, account, filePath)
}

// pickerCatalog is the built-in catalog with a LoadImage whose upload
// picker lists files, as a ComfyUI worker's does.
func pickerCatalog(t *testing.T) workflow.Catalog {
	t.Helper()
	builtin, err := (&BuiltinExecutor{}).Catalog(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	picker, err := workflow.ParseObjectInfo([]byte(`{"LoadImage":{"input":{"required":{
		"image":[["both.png","stock.png"],{"image_upload":true}]}},
		"output":["IMAGE","MASK"],"output_node":false}}`))
	if err != nil {
		t.Fatal(err)
	}
	cat := maps.Clone(builtin)
	cat["LoadImage"] = picker["LoadImage"]
	return cat
}

// scaleGraph loads image, scales it with method and saves it.
func scaleGraph(image, method string) map[string]node {
	return map[string]node{
		"1": {"LoadImage", map[string]any{"image": image}},
		"2": {"ImageScale", map[string]any{"image": link("1"), "upscale_method": method,
			"width": 8, "height": 8, "crop": "disabled"}},
		"3": {"SaveImage", map[string]any{"images": link("2"), "filename_prefix": "s"}},
	}
}

// A combo value that is one of the node's own listed options is never
// looked up among the caller's assets, and skipping the lookup changes no
// outcome; upload pickers are always looked up.
func TestResolveAssetsSkipsListedOptions(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	_, pngBytes := testPNG(t)
	for _, name := range []string{"both.png", "photo.png", "bilinear", "custom-mode"} {
		e.addAsset(t, "acct", name, pngBytes)
	}
	cat := pickerCatalog(t)
	tests := []struct {
		name  string
		graph map[string]node
		// finds are the file names looked up, in order.
		finds []string
		// resolved are the inputs resolved to one of the caller's assets.
		resolved []workflow.InputKey
		// code is the refusal's code, "" when the submit is valid.
		code string
	}{
		{"listed option, no asset of that name", scaleGraph("photo.png", "area"),
			[]string{"photo.png"}, []workflow.InputKey{{Node: "1", Input: "image"}}, ""},
		{"listed option that is also an asset's name", scaleGraph("photo.png", "bilinear"),
			[]string{"photo.png"}, []workflow.InputKey{{Node: "1", Input: "image"}}, ""},
		{"unlisted value naming an asset", scaleGraph("photo.png", "custom-mode"),
			[]string{"photo.png", "custom-mode"},
			[]workflow.InputKey{{Node: "1", Input: "image"}, {Node: "2", Input: "upscale_method"}}, ""},
		{"unlisted value naming nothing", scaleGraph("photo.png", "sideways"),
			[]string{"photo.png", "sideways"}, []workflow.InputKey{{Node: "1", Input: "image"}}, "invalid_workflow"},
		{"upload picker: listed name that is an asset", scaleGraph("both.png", "area"),
			[]string{"both.png"}, []workflow.InputKey{{Node: "1", Input: "image"}}, ""},
		{"upload picker: listed name that is no asset", scaleGraph("stock.png", "area"),
			[]string{"stock.png"}, nil, ""},
		{"upload picker: unlisted name that is no asset", scaleGraph("nope.png", "area"),
			[]string{"nope.png"}, nil, "missing_asset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cs := &countingStore{Store: e.store}
			svc := *e.svc
			svc.Store = cs
			svc.Catalog = func(context.Context) (workflow.Catalog, error) { return cat, nil }
			sub, err := workflow.ParseSubmit(submitBody(t, tt.graph), workflow.DefaultLimits())
			if err != nil {
				t.Fatal(err)
			}
			resolved, err := svc.resolveAssets(ctx, "acct", sub.Workflow, cat)
			if err == nil {
				err = workflow.Validate(sub.Workflow, cat, workflow.WithResolvedInputs(resolved))
			}
			if tt.code != "" {
				wantAPIErr(t, err, 422, tt.code)
			} else if err != nil {
				t.Fatalf("valid workflow refused: %v", err)
			}
			if !slices.Equal(cs.finds, tt.finds) {
				t.Errorf("looked up %q, want %q", cs.finds, tt.finds)
			}
			if tt.code != "missing_asset" {
				want := map[workflow.InputKey]bool{}
				for _, k := range tt.resolved {
					want[k] = true
				}
				if !maps.Equal(resolved, want) {
					t.Errorf("resolved %v, want %v", resolved, want)
				}
			}
			// The whole submit agrees with the parts.
			cs.finds = nil
			_, err = svc.Submit(ctx, "acct", submitBody(t, tt.graph))
			if tt.code != "" {
				wantAPIErr(t, err, 422, tt.code)
			} else if err != nil {
				t.Fatalf("Submit: %v", err)
			}
			if !slices.Equal(cs.finds, tt.finds) {
				t.Errorf("Submit looked up %q, want %q", cs.finds, tt.finds)
			}
		})
	}
}
