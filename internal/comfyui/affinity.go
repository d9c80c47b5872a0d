package comfyui

import (
	"encoding/json"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/comfygate/comfygate/internal/workflow"
)

// Model affinity. A job's models are the values of its loader inputs: the
// combo inputs of the catalog whose choices are files of a model folder.
// ComfyUI's /object_info does not say which folder a combo lists, so a
// combo counts as a model-folder combo when one of its choices has a model
// file's extension; a worker with no model files installed lists none,
// and then the loader input names ComfyUI's own loaders use stand in.

// modelExts are the extensions ComfyUI's folder_paths accepts for models.
var modelExts = []string{".safetensors", ".ckpt", ".pt", ".pt2", ".pth", ".bin", ".pkl", ".sft", ".gguf", ".onnx"}

// loaderInputs are the model inputs of ComfyUI's core loaders, used for a
// combo whose choices are unknown or hold no model file.
var loaderInputs = map[string]bool{
	"ckpt_name": true, "unet_name": true, "vae_name": true, "lora_name": true, "clip_name": true,
	"clip_name1": true, "clip_name2": true, "clip_name3": true, "clip_name4": true,
	"control_net_name": true, "style_model_name": true, "clip_vision_name": true,
	"upscale_model_name": true, "gligen_name": true, "hypernetwork_name": true, "model_name": true,
}

func isModelFile(name string) bool {
	return slices.Contains(modelExts, strings.ToLower(path.Ext(name)))
}

// isModelCombo reports whether spec is a combo that lists model files.
func isModelCombo(spec workflow.InputSpec) bool {
	if !spec.IsCombo() || spec.Upload() {
		return false
	}
	for _, c := range spec.Choices {
		if s, ok := c.(string); ok && isModelFile(s) {
			return true
		}
	}
	return loaderInputs[spec.Name]
}

// modelsOf lists, sorted and without repeats, the model files g loads: the
// literal values of its model-folder combos (see isModelCombo). Classes
// lookup does not know contribute nothing.
func modelsOf(g workflow.Graph, lookup func(class string) (workflow.NodeClass, bool)) []string {
	var models []string
	for _, n := range g {
		class, ok := lookup(n.ClassType)
		if !ok {
			continue
		}
		for name, raw := range n.Inputs {
			spec, _, ok := class.Input(name)
			if !ok || !isModelCombo(spec) {
				continue
			}
			var v string
			if json.Unmarshal(raw, &v) != nil || v == "" {
				continue // a link or not a file name
			}
			models = append(models, v)
		}
	}
	slices.Sort(models)
	return slices.Compact(models)
}

// modelLRU is the bounded set of models a worker's recent executions
// loaded, most recent last.
type modelLRU struct {
	size   int
	models []string
}

// use marks models as the most recently loaded, evicting beyond size.
func (l *modelLRU) use(models []string) {
	for _, m := range models {
		if i := slices.Index(l.models, m); i >= 0 {
			l.models = slices.Delete(l.models, i, i+1)
		}
		l.models = append(l.models, m)
	}
	if len(l.models) > l.size {
		l.models = slices.Delete(l.models, 0, len(l.models)-l.size)
	}
}

// holds counts how many of models the set holds.
func (l *modelLRU) holds(models []string) int {
	n := 0
	for _, m := range models {
		if slices.Contains(l.models, m) {
			n++
		}
	}
	return n
}

func (l *modelLRU) reset() { l.models = nil }

// runTimes learns, as moving averages, how long attempts take on a worker
// that held their models (warm) and on one that did not (cold); the
// difference is what a cold load costs, which bounds how long waiting for
// a warm worker is worth it.
type runTimes struct {
	mu         sync.Mutex
	warm, cold time.Duration
	seenWarm   bool
	seenCold   bool
}

// runTimesWeight is the weight of the newest observation.
const runTimesWeight = 0.2

func (r *runTimes) observe(warm bool, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	avg, seen := &r.cold, &r.seenCold
	if warm {
		avg, seen = &r.warm, &r.seenWarm
	}
	if !*seen {
		*avg, *seen = d, true
		return
	}
	*avg += time.Duration(runTimesWeight * float64(d-*avg))
}

// estimates returns the warm attempt time and the cold-load penalty; ok is
// false until both kinds were seen.
func (r *runTimes) estimates() (warm, penalty time.Duration, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seenWarm || !r.seenCold {
		return 0, 0, false
	}
	return r.warm, max(r.cold-r.warm, 0), true
}
