package comfyuipeer

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestModelMemory holds the peer's model memory to its contract: a cold
// loader counts a load, a warm one does not, memory keeps ModelSlots
// models (least recently used out first), /free unload_models empties it.
func TestModelMemory(t *testing.T) {
	p := New(t, Options{Models: []string{"a.safetensors", "b.safetensors", "c.safetensors"}, ModelSlots: 2,
		Warm: []string{"a.safetensors"}})
	var info map[string]json.RawMessage
	resp, err := http.Get(p.URL + "/object_info")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&info)
	resp.Body.Close()
	if !strings.Contains(string(info["CheckpointLoaderSimple"]), `"ckpt_name":[["a.safetensors","b.safetensors","c.safetensors"]`) {
		t.Fatalf("CheckpointLoaderSimple = %s", info["CheckpointLoaderSimple"])
	}
	run := func(model string) {
		t.Helper()
		body := fmt.Sprintf(`{"prompt":{"1":{"class_type":"CheckpointLoaderSimple","inputs":{"ckpt_name":%q}},`+
			`"2":{"class_type":"SlowNode","inputs":{"steps":1,"step_ms":0,"model":["1",0]}}}}`, model)
		resp, err := http.Post(p.URL+"/prompt", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var ans struct {
			PromptID string `json:"prompt_id"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&ans)
		resp.Body.Close()
		for deadline := time.Now().Add(10 * time.Second); !slices.Contains(p.HistoryIDs(), ans.PromptID); {
			if time.Now().After(deadline) {
				t.Fatalf("prompt %q of %s never finished", ans.PromptID, model)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	steps := []struct {
		model string
		loads int
		held  []string
	}{
		{"a.safetensors", 0, []string{"a.safetensors"}},
		{"b.safetensors", 1, []string{"a.safetensors", "b.safetensors"}},
		{"a.safetensors", 1, []string{"b.safetensors", "a.safetensors"}},
		{"c.safetensors", 2, []string{"a.safetensors", "c.safetensors"}},
		{"b.safetensors", 3, []string{"c.safetensors", "b.safetensors"}},
	}
	for i, s := range steps {
		run(s.model)
		if got := p.Stats().ModelLoads; got != s.loads {
			t.Errorf("step %d (%s): %d loads, want %d", i, s.model, got, s.loads)
		}
		if got := p.Models(); !slices.Equal(got, s.held) {
			t.Errorf("step %d (%s): memory %v, want %v", i, s.model, got, s.held)
		}
	}
	resp, err = http.Post(p.URL+"/free", "application/json", strings.NewReader(`{"unload_models":true,"free_memory":true}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := p.Models(); resp.StatusCode != 200 || len(got) != 0 || p.Stats().Frees != 1 {
		t.Fatalf("after /free: %d, memory %v, frees %d", resp.StatusCode, got, p.Stats().Frees)
	}
	run("b.safetensors")
	if got := p.Stats().ModelLoads; got != 4 {
		t.Errorf("after /free b loads again: %d loads, want 4", got)
	}
}
