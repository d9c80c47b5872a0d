package comfyuipeer

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
)

func newID() string { return uuid.NewString() }

func (p *Peer) getPrompt(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	n := p.queueRemaining()
	p.mu.Unlock()
	writeJSON(w, 200, map[string]any{"exec_info": map[string]any{"queue_remaining": n}})
}

// postPrompt validates and queues a prompt like ComfyUI: unknown classes
// are a 400 invalid_prompt; a LoadImage whose file is not in the input
// folder fails custom validation; the node-error switches fake the rest.
func (p *Peer) postPrompt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Prompt    json.RawMessage `json:"prompt"`
		PromptID  any             `json:"prompt_id"`
		ClientID  string          `json:"client_id"`
		ExtraData json.RawMessage `json:"extra_data"`
	}
	if p.refuseWhileStopping(w) {
		return
	}
	p.mu.Lock()
	refuse := p.sw.RefusePrompts
	p.mu.Unlock()
	if refuse {
		http.Error(w, "503 Service Unavailable", http.StatusServiceUnavailable)
		return
	}
	p.logf("got prompt")
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "500 Internal Server Error", http.StatusInternalServerError)
		return
	}
	p.mu.Lock()
	p.stats.Prompts++
	sw := p.sw
	p.mu.Unlock()
	if len(body.Prompt) == 0 {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "no_prompt", "message": "No prompt provided", "details": "No prompt provided", "extra_info": map[string]any{}}, "node_errors": []any{}})
		return
	}
	var nodes map[string]node
	if err := json.Unmarshal(body.Prompt, &nodes); err != nil {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "invalid_prompt", "message": "Invalid prompt", "details": err.Error(), "extra_info": map[string]any{}}, "node_errors": []any{}})
		return
	}
	ids := make([]string, 0, len(nodes))
	for id := range nodes {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	var outputs []string
	for _, id := range ids {
		n := nodes[id]
		if _, ok := p.catalog[n.ClassType]; !ok {
			writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "invalid_prompt",
				"message": fmt.Sprintf("Cannot execute because node %s does not exist.", n.ClassType), "details": fmt.Sprintf("Node ID '#%s'", id), "extra_info": map[string]any{}}, "node_errors": map[string]any{}})
			return
		}
		if isOutputClass(p.catalog[n.ClassType]) {
			outputs = append(outputs, id)
		}
	}
	if len(outputs) == 0 {
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "prompt_no_outputs", "message": "Prompt has no outputs", "details": "", "extra_info": map[string]any{}}, "node_errors": []any{}})
		return
	}
	nodeErrors := map[string]any{}
	for _, id := range ids {
		if n := nodes[id]; n.ClassType == "LoadImage" {
			name, _ := n.Inputs["image"].(string)
			if !p.hasInput(name) {
				nodeErrors[outputs[0]] = nodeError(nodes[outputs[0]].ClassType, outputs[0], "custom_validation_failed",
					"Failed to validate prompt for output "+outputs[0], "image - Invalid image file: "+name)
			}
		}
	}
	if sw.NodeErrors400 || sw.NodeErrors200 {
		nodeErrors[outputs[0]] = nodeError(nodes[outputs[0]].ClassType, outputs[0], "value_not_in_list",
			"Value not in list", "filename_prefix: 'x' not in []")
	}
	if len(nodeErrors) > 0 && !sw.NodeErrors200 {
		p.logf("invalid prompt: Prompt outputs failed validation")
		writeJSON(w, 400, map[string]any{"error": map[string]any{"type": "prompt_outputs_failed_validation",
			"message": "Prompt outputs failed validation", "details": "", "extra_info": map[string]any{}}, "node_errors": nodeErrors})
		return
	}
	id := fmt.Sprint(body.PromptID)
	if body.PromptID == nil || sw.OwnPromptIDs || sw.UnmatchedAnswers {
		id = newID()
	}
	p.mu.Lock()
	p.number++
	pr := &prompt{id: id, number: p.number, clientID: body.ClientID, raw: body.Prompt, nodes: nodes, extra: body.ExtraData}
	pr.ctx, pr.cancel = context.WithCancel(p.life)
	p.pending = append(p.pending, pr)
	wake := p.wake
	p.mu.Unlock()
	select {
	case wake <- struct{}{}:
	default:
	}
	p.broadcastStatus()
	time.Sleep(sw.AnswerDelay)
	if sw.DropAnswers {
		if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	if sw.UnmatchedAnswers {
		id = newID()
	}
	writeJSON(w, 200, map[string]any{"prompt_id": id, "number": pr.number, "node_errors": nodeErrors})
}

func nodeError(class, id, typ, msg, details string) map[string]any {
	return map[string]any{
		"errors":            []any{map[string]any{"type": typ, "message": msg, "details": details, "extra_info": map[string]any{}}},
		"dependent_outputs": []string{id},
		"class_type":        class,
	}
}

func (p *Peer) hasInput(name string) bool {
	name = strings.TrimSuffix(name, " [input]")
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inputs.has(name)
}

func queueItem(pr *prompt) []any {
	return []any{pr.number, pr.id, pr.raw, pr.extra, []string{}}
}

func (p *Peer) getQueue(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	running, pending := []any{}, []any{}
	if p.running != nil {
		running = append(running, queueItem(p.running))
	}
	for _, pr := range p.pending {
		pending = append(pending, queueItem(pr))
	}
	p.mu.Unlock()
	writeJSON(w, 200, map[string]any{"queue_running": running, "queue_pending": pending})
}

func (p *Peer) postQueue(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Delete []string `json:"delete"`
		Clear  bool     `json:"clear"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	if body.Clear {
		p.pending = nil
	}
	if len(body.Delete) > 0 {
		p.stats.QueueDeletes++
		kept := p.pending[:0]
		for _, pr := range p.pending {
			if !contains(body.Delete, pr.id) {
				kept = append(kept, pr)
			}
		}
		p.pending = kept
	}
	p.mu.Unlock()
	w.WriteHeader(200)
}

// postInterrupt interrupts the running prompt: the one named by
// prompt_id, or whichever runs when the body names none.
func (p *Peer) postInterrupt(w http.ResponseWriter, r *http.Request) {
	var body struct {
		PromptID string `json:"prompt_id"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	p.stats.Interrupts++
	if p.running != nil && (body.PromptID == "" || body.PromptID == p.running.id) {
		p.running.cancel()
	}
	p.mu.Unlock()
	w.WriteHeader(200)
}

func (p *Peer) getHistory(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]json.RawMessage{}
	if id := r.PathValue("id"); id != "" {
		if h, ok := p.history[id]; ok {
			out[id] = h
		}
	} else {
		for id, h := range p.history {
			out[id] = h
		}
	}
	writeJSON(w, 200, out)
}

func (p *Peer) postHistory(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Delete []string `json:"delete"`
		Clear  bool     `json:"clear"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	p.mu.Lock()
	if body.Clear {
		p.history = map[string]json.RawMessage{}
	}
	for _, id := range body.Delete {
		p.stats.HistoryDeletes++
		delete(p.history, id)
	}
	p.mu.Unlock()
	w.WriteHeader(200)
}

func (p *Peer) view(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name, sub, typ := q.Get("filename"), q.Get("subfolder"), q.Get("type")
	if typ == "" {
		typ = "output"
	}
	if strings.HasPrefix(name, "/") || strings.Contains(name, "..") {
		http.Error(w, "bad filename", 400)
		return
	}
	if strings.Contains(sub, "..") || strings.HasPrefix(sub, "/") {
		http.Error(w, "forbidden", http.StatusForbidden)
		return
	}
	p.mu.Lock()
	var data []byte
	var ok bool
	if typ == "input" {
		data, ok = p.inputs.get(path.Join(sub, name))
	} else {
		data, ok = p.files[typ+"/"+path.Join(sub, name)]
	}
	p.mu.Unlock()
	if !ok {
		http.Error(w, "not found", 404)
		return
	}
	w.Header().Set("Content-Disposition", fmt.Sprintf("filename=%q", name))
	_, _ = w.Write(data)
}

// upload stores an input file; with overwrite it replaces a file of the
// same name, else identical content is reused and different content renamed.
func (p *Peer) upload(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseMultipartForm(32 << 20); err != nil {
		http.Error(w, "bad form", 400)
		return
	}
	f, hdr, err := r.FormFile("image")
	if err != nil {
		http.Error(w, "no image", 400)
		return
	}
	defer f.Close()
	data, _ := io.ReadAll(f)
	sub := r.FormValue("subfolder")
	if strings.Contains(sub, "..") || strings.HasPrefix(sub, "/") {
		http.Error(w, "bad subfolder", 400)
		return
	}
	typ := r.FormValue("type")
	if typ == "" {
		typ = "input"
	}
	overwrite := r.FormValue("overwrite") == "true" || r.FormValue("overwrite") == "1"
	name := path.Base(hdr.Filename)
	if name == "." || name == ".." || name == "/" {
		http.Error(w, "bad filename", 400)
		return
	}
	p.mu.Lock()
	p.stats.Uploads++
	if typ == "input" {
		key := path.Join(sub, name)
		if old, exists := p.inputs.get(key); exists && !overwrite && string(old) != string(data) {
			name = p.inputs.uniqueName(sub, name)
			key = path.Join(sub, name)
		}
		if err := p.inputs.put(key, data); err != nil {
			p.mu.Unlock()
			http.Error(w, "cannot store the input: "+err.Error(), 500)
			return
		}
	} else {
		p.files[typ+"/"+path.Join(sub, name)] = data
	}
	p.mu.Unlock()
	writeJSON(w, 200, map[string]any{"name": name, "subfolder": sub, "type": typ})
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
