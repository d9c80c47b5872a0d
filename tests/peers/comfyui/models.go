package comfyuipeer

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Model memory. With Options.Models set the peer has loader nodes whose
// model-file combo lists those files, as ComfyUI's loaders list the files of
// a model folder. Executing a loader whose model is not in memory costs
// Options.ModelLoad (a cold load); a model in memory is free (warm). Memory
// holds Options.ModelSlots models, the least recently used leaving first.
// A restart or POST /free {"unload_models": true} empties it.

// loaderClasses are the peer's model loaders: class → model-folder input.
var loaderClasses = map[string]string{
	"CheckpointLoaderSimple": "ckpt_name",
	"LoraLoaderModelOnly":    "lora_name",
	"VAELoader":              "vae_name",
}

// loaderCatalog adds the loader classes with models as every loader's combo.
func loaderCatalog(cat map[string]json.RawMessage, models []string) {
	choices, _ := json.Marshal(models)
	for class, input := range loaderClasses {
		cat[class] = json.RawMessage(fmt.Sprintf(`{"input":{"required":{%q:[%s,{"tooltip":"a file of the models folder"}]}},`+
			`"input_order":{"required":[%q]},"output":["MODEL"],"output_is_list":[false],"output_name":["MODEL"],`+
			`"name":%q,"display_name":%q,"description":"","python_module":"nodes","category":"loaders","output_node":false}`,
			input, choices, input, class, class))
	}
}

// modelMemory is the set of models in memory, most recently used last.
type modelMemory struct {
	slots int
	held  []string
}

func (m *modelMemory) has(name string) bool { return slices.Contains(m.held, name) }

// use marks name as the most recently used, evicting beyond slots.
func (m *modelMemory) use(name string) {
	if i := slices.Index(m.held, name); i >= 0 {
		m.held = slices.Delete(m.held, i, i+1)
	}
	m.held = append(m.held, name)
	if len(m.held) > m.slots {
		m.held = m.held[len(m.held)-m.slots:]
	}
}

// loadModel runs a loader node: free when the model is in memory, else
// ModelLoad of (interruptible) loading. False when interrupted.
func (p *Peer) loadModel(ctx context.Context, name string) bool {
	p.mu.Lock()
	warm := p.models.has(name)
	delay := p.modelLoad
	if !warm {
		p.stats.ModelLoads++
	}
	p.mu.Unlock()
	if !warm && !sleepCtx(ctx, delay) {
		return false
	}
	p.mu.Lock()
	p.models.use(name)
	p.mu.Unlock()
	return true
}

// Models lists the models in memory, least recently used first.
func (p *Peer) Models() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.models.held)
}

// postFree serves POST /free as ComfyUI does: unload_models empties the
// model memory; free_memory alone is accepted and changes nothing here.
func (p *Peer) postFree(w http.ResponseWriter, r *http.Request) {
	var body struct {
		UnloadModels bool `json:"unload_models"`
		FreeMemory   bool `json:"free_memory"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	p.stats.Frees++
	if body.UnloadModels {
		p.models.held = nil
	}
	p.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// busySince starts the busy clock of one execution; the returned func
// stops it and adds the time to Stats.Busy.
func (p *Peer) busySince() func() {
	start := time.Now()
	return func() {
		p.mu.Lock()
		p.stats.Busy += time.Since(start)
		p.mu.Unlock()
	}
}
