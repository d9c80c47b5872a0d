package comfyui

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/comfygate/comfygate/internal/workflow"
)

// affinityCatalog has loaders whose combos list model files, one whose
// list is empty (a worker with no such models), an upload combo of model
// extensions and an ordinary combo.
const affinityCatalog = `{
 "CheckpointLoaderSimple": {"input": {"required": {"ckpt_name": [["sd15.safetensors", "xl.ckpt"], {}]}}, "output": ["MODEL"], "name": "CheckpointLoaderSimple"},
 "CustomLoader": {"input": {"required": {"weights": [["a.gguf", "b.gguf"], {}], "dtype": [["fp16", "bf16"], {}]}}, "output": ["MODEL"], "name": "CustomLoader"},
 "VAELoader": {"input": {"required": {"vae_name": [[], {}]}}, "output": ["VAE"], "name": "VAELoader"},
 "LoadFile": {"input": {"required": {"file": [["x.safetensors"], {"image_upload": true}]}}, "output": ["X"], "name": "LoadFile"},
 "KSampler": {"input": {"required": {"model": ["MODEL"], "sampler_name": [["euler", "ddim"], {}], "seed": ["INT", {}]}}, "output": ["LATENT"], "name": "KSampler", "output_node": true}
}`

func TestModelsOf(t *testing.T) {
	cat, err := workflow.ParseObjectInfo([]byte(affinityCatalog))
	if err != nil {
		t.Fatal(err)
	}
	lookup := func(c string) (workflow.NodeClass, bool) { n, ok := cat[c]; return n, ok }
	tests := []struct {
		name  string
		graph string
		want  []string
	}{
		{"checkpoint", `{"1":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"sd15.safetensors"}}}`, []string{"sd15.safetensors"}},
		{"a custom loader's model combo, not its dtype combo", `{"1":{"class_type":"CustomLoader","inputs":{"weights":"b.gguf","dtype":"fp16"}}}`, []string{"b.gguf"}},
		{"a loader input with no choices listed", `{"1":{"class_type":"VAELoader","inputs":{"vae_name":"ae.sft"}}}`, []string{"ae.sft"}},
		{"an upload combo is an input, not a model", `{"1":{"class_type":"LoadFile","inputs":{"file":"x.safetensors"}}}`, nil},
		{"plain combos and links", `{"1":{"class_type":"KSampler","inputs":{"model":["2",0],"sampler_name":"euler","seed":1}}}`, nil},
		{"an unknown class", `{"1":{"class_type":"Mystery","inputs":{"ckpt_name":"m.safetensors"}}}`, nil},
		{"sorted, each once", `{"1":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"xl.ckpt"}},
			"2":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"sd15.safetensors"}},
			"3":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":"xl.ckpt"}},
			"4":{"class_type":"CustomLoader","inputs":{"weights":["1",0]}}}`, []string{"sd15.safetensors", "xl.ckpt"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var g workflow.Graph
			if err := json.Unmarshal([]byte(tt.graph), &g); err != nil {
				t.Fatal(err)
			}
			if got := modelsOf(g, lookup); !slices.Equal(got, tt.want) {
				t.Fatalf("modelsOf = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestModelLRU(t *testing.T) {
	tests := []struct {
		name  string
		size  int
		uses  [][]string
		want  []string
		probe []string
		held  int
	}{
		{"keeps the most recent", 2, [][]string{{"a"}, {"b"}, {"c"}}, []string{"b", "c"}, []string{"a", "c"}, 1},
		{"a reuse refreshes", 2, [][]string{{"a"}, {"b"}, {"a"}, {"c"}}, []string{"a", "c"}, []string{"a", "c"}, 2},
		{"one job's models together", 3, [][]string{{"a", "b"}, {"c", "d"}}, []string{"b", "c", "d"}, []string{"a", "b"}, 1},
		{"nothing", 2, nil, nil, []string{"a"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := modelLRU{size: tt.size}
			for _, u := range tt.uses {
				l.use(u)
			}
			if !slices.Equal(l.models, tt.want) {
				t.Fatalf("models = %v, want %v", l.models, tt.want)
			}
			if got := l.holds(tt.probe); got != tt.held {
				t.Fatalf("holds(%v) = %d, want %d", tt.probe, got, tt.held)
			}
			l.reset()
			if l.holds(tt.probe) != 0 {
				t.Fatal("reset kept models")
			}
		})
	}
}
