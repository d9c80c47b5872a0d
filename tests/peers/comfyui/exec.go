package comfyuipeer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math/rand/v2"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/comfygate/comfygate/internal/builtin"
)

// fakeClasses are the peer's own nodes, next to the built-in image nodes.
var fakeClasses = map[string]string{
	"SlowNode": `{"required":{"steps":["INT",{"default":10,"min":1,"max":10000}],"step_ms":["INT",{"default":20,"min":0,"max":60000}]},` +
		`"optional":{"model":["MODEL"]}}`,
	"TextOutput":  `{"required":{"text":["STRING",{"multiline":true}]}}`,
	"MediaOutput": `{"required":{"filename_prefix":["STRING",{"default":"media"}]}}`,
	"FailNode":    `{"required":{"message":["STRING",{"default":"boom"}]}}`,
	"PreviewNode": `{"required":{"frames":["INT",{"default":3,"min":1,"max":1000}],"step_ms":["INT",{"default":100,"min":0,"max":60000}]},` +
		`"optional":{"size":["INT",{"default":4,"min":1,"max":1024}]}}`,
	"PrintNode": `{"required":{"text":["STRING",{"multiline":true}],"times":["INT",{"default":1,"min":1,"max":100000}]}}`,
}

func catalog(omit []string) map[string]json.RawMessage {
	cat := map[string]json.RawMessage{}
	if err := json.Unmarshal(builtin.ObjectInfo(), &cat); err != nil {
		panic(err)
	}
	for name, input := range fakeClasses {
		cat[name] = json.RawMessage(fmt.Sprintf(`{"input":%s,"input_order":{},"output":[],"output_is_list":[],"output_name":[],`+
			`"name":%q,"display_name":%q,"description":"","python_module":"custom_nodes.peer","category":"testing","output_node":true}`,
			input, name, name))
	}
	for _, name := range omit {
		delete(cat, name)
	}
	return cat
}

func isOutputClass(raw json.RawMessage) bool {
	var c struct {
		OutputNode bool `json:"output_node"`
	}
	return json.Unmarshal(raw, &c) == nil && c.OutputNode
}

// executor runs queued prompts one at a time, like ComfyUI's single
// execution thread, until its life ends.
func (p *Peer) executor(life context.Context, wake chan struct{}) {
	for {
		select {
		case <-life.Done():
			return
		case <-wake:
		}
		for {
			p.mu.Lock()
			if life.Err() != nil || len(p.pending) == 0 || p.running != nil {
				p.mu.Unlock()
				break
			}
			pr := p.pending[0]
			p.pending = p.pending[1:]
			p.running = pr
			p.mu.Unlock()
			p.broadcastStatus()
			p.execute(life, pr)
		}
	}
}

// execution is one prompt's run: its events and what history will say.
type execution struct {
	p        *Peer
	life     context.Context
	pr       *prompt
	outputs  map[string]any
	messages [][]any
	executed []string
}

func (e *execution) send(typ string, data map[string]any) {
	if e.life.Err() != nil {
		return // a crashed or restarted server sends nothing more
	}
	data["prompt_id"] = e.pr.id
	if typ != "executing" && typ != "progress" && typ != "progress_state" && typ != "executed" {
		data["timestamp"] = time.Now().UnixMilli()
		e.messages = append(e.messages, []any{typ, data})
	}
	e.p.send(e.pr.clientID, typ, data)
}

func (p *Peer) execute(life context.Context, pr *prompt) {
	start := time.Now()
	defer p.busySince()()
	e := &execution{p: p, life: life, pr: pr, outputs: map[string]any{}}
	e.send("execution_start", map[string]any{})
	e.send("execution_cached", map[string]any{"nodes": []string{}})
	status := e.run()
	if status == "success" {
		e.send("execution_success", map[string]any{})
		p.mu.Lock()
		delay := p.sw.HistoryDelay
		p.mu.Unlock()
		sleepCtx(life, delay)
	}
	p.mu.Lock()
	if life.Err() != nil {
		p.mu.Unlock()
		return
	}
	entry, _ := json.Marshal(map[string]any{
		"prompt":  queueItem(pr),
		"outputs": e.outputs,
		"status":  map[string]any{"status_str": status, "completed": status == "success", "messages": e.messages},
		"meta":    map[string]any{},
	})
	p.history[pr.id] = entry
	if p.running == pr {
		p.running = nil
	}
	wake := p.wake
	p.mu.Unlock()
	e.send("executing", map[string]any{"node": nil, "display_node": nil})
	// As ComfyUI's prompt worker: the timing line follows the final event.
	p.logf(fmt.Sprintf("Prompt executed in %.2f seconds", time.Since(start).Seconds()))
	p.broadcastStatus()
	select {
	case wake <- struct{}{}:
	default:
	}
}

// run executes the peer's own nodes, then the built-in ones; it returns
// the history status: success or error.
func (e *execution) run() string {
	pr := e.pr
	var loaders, fakes []string
	for id, n := range pr.nodes {
		if _, ok := fakeClasses[n.ClassType]; ok {
			fakes = append(fakes, id)
		}
		if _, ok := loaderClasses[n.ClassType]; ok {
			loaders = append(loaders, id)
		}
	}
	sort.Strings(loaders)
	for _, id := range loaders {
		n := pr.nodes[id]
		e.send("executing", map[string]any{"node": id, "display_node": id})
		name, _ := n.Inputs[loaderClasses[n.ClassType]].(string)
		if !e.p.loadModel(pr.ctx, name) {
			return e.interrupted(id, n.ClassType)
		}
		e.finished(id, nil)
	}
	sort.Strings(fakes)
	for _, id := range fakes {
		class := pr.nodes[id].ClassType
		if !e.p.slow(pr.ctx) {
			return e.interrupted(id, class)
		}
		e.send("executing", map[string]any{"node": id, "display_node": id})
		ui, err := e.runFake(id, pr.nodes[id])
		if pr.ctx.Err() != nil {
			return e.interrupted(id, class)
		}
		if err != nil {
			return e.fail(id, class, err.Error())
		}
		e.finished(id, ui)
	}
	collected := map[string][]any{}
	err := builtin.Execute(pr.ctx, builtinPrompt(pr.nodes), builtin.Env{
		OpenInput: func(_ context.Context, name string) (io.ReadCloser, error) {
			name = strings.TrimSuffix(name, " [input]")
			e.p.mu.Lock()
			data, ok := e.p.inputs.get(name)
			e.p.mu.Unlock()
			if !ok {
				//lint:ignore ST1005 ComfyUI's own message, word for word: the peer speaks as ComfyUI does
				return nil, fmt.Errorf("Invalid image file: %s", name)
			}
			return io.NopCloser(bytes.NewReader(data)), nil
		},
		PromptJSON: pr.raw,
		OnOutput: func(_ context.Context, o builtin.Output) error {
			e.p.mu.Lock()
			e.p.files[o.Type+"/"+path.Join(o.Subfolder, o.Filename)] = o.Data
			e.p.mu.Unlock()
			collected[o.NodeID] = append(collected[o.NodeID], map[string]any{"filename": o.Filename, "subfolder": o.Subfolder, "type": o.Type})
			return nil
		},
		OnProgress: func(pg builtin.Progress) {
			e.send("executing", map[string]any{"node": pg.NodeID, "display_node": pg.NodeID})
			var ui map[string]any
			if files := collected[pg.NodeID]; len(files) > 0 {
				ui = map[string]any{"images": files}
			}
			e.finished(pg.NodeID, ui)
			e.p.slow(pr.ctx)
		},
	})
	var ne *builtin.NodeError
	switch {
	case err == nil, errors.Is(err, builtin.ErrNoOutputs):
		return "success"
	case pr.ctx.Err() != nil:
		return e.interrupted("", "")
	case errors.As(err, &ne):
		return e.fail(ne.NodeID, ne.ClassType, ne.Message)
	default:
		return e.fail("", "", err.Error())
	}
}

func (e *execution) finished(id string, ui map[string]any) {
	e.executed = append(e.executed, id)
	e.send("progress_state", map[string]any{"nodes": map[string]any{id: map[string]any{
		"value": 1, "max": 1, "state": "finished", "node_id": id, "prompt_id": e.pr.id,
		"display_node_id": id, "parent_node_id": nil, "real_node_id": id}}})
	if ui != nil {
		e.outputs[id] = ui
		e.send("executed", map[string]any{"node": id, "display_node": id, "output": ui})
	}
}

func (e *execution) fail(id, class, msg string) string {
	e.p.logf("!!! Exception during processing !!! " + msg)
	e.p.logf("Traceback (most recent call last):\n  File \"peer.py\", line 1, in " + class + "\nRuntimeError: " + msg)
	e.send("execution_error", map[string]any{"node_id": id, "node_type": class, "executed": e.executed,
		"exception_message": msg, "exception_type": "RuntimeError",
		"traceback":      []string{"Traceback (most recent call last):\n", fmt.Sprintf("  File \"peer.py\", line 1, in %s\n", class), "RuntimeError: " + msg + "\n"},
		"current_inputs": map[string]any{}, "current_outputs": map[string]any{}})
	return "error"
}

func (e *execution) interrupted(id, class string) string {
	e.p.logf("Processing interrupted")
	e.send("execution_interrupted", map[string]any{"node_id": id, "node_type": class, "executed": e.executed})
	return "error"
}

// slow applies the Slow switch; false when the prompt was interrupted.
func (p *Peer) slow(ctx context.Context) bool {
	p.mu.Lock()
	d := p.sw.Slow
	p.mu.Unlock()
	return sleepCtx(ctx, d) && ctx.Err() == nil
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (e *execution) runFake(id string, n node) (map[string]any, error) {
	ctx := e.pr.ctx
	switch n.ClassType {
	case "SlowNode":
		steps, stepMS := intInput(n, "steps", 10), intInput(n, "step_ms", 20)
		for i := 1; i <= steps; i++ {
			if !sleepCtx(ctx, time.Duration(stepMS)*time.Millisecond) {
				return nil, ctx.Err()
			}
			e.send("progress", map[string]any{"value": i, "max": steps, "node": id})
		}
		return nil, nil
	case "TextOutput":
		s, _ := n.Inputs["text"].(string)
		return map[string]any{"text": []string{s}}, nil
	case "MediaOutput":
		prefix, _ := n.Inputs["filename_prefix"].(string)
		sub, base := path.Split(prefix)
		sub = strings.TrimSuffix(sub, "/")
		video, audio := base+"_00001_.mp4", base+"_00001_.flac"
		e.p.mu.Lock()
		e.p.files["output/"+path.Join(sub, video)] = []byte("fake mp4 of node " + id)
		e.p.files["output/"+path.Join(sub, audio)] = []byte("fake flac of node " + id)
		e.p.mu.Unlock()
		return map[string]any{
			"gifs":     []any{map[string]any{"filename": video, "subfolder": sub, "type": "output", "format": "video/h264-mp4"}},
			"audio":    []any{map[string]any{"filename": audio, "subfolder": sub, "type": "output"}},
			"animated": []bool{true},
		}, nil
	case "PrintNode":
		text, _ := n.Inputs["text"].(string)
		for range intInput(n, "times", 1) {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			e.p.printText(text)
		}
		return nil, nil
	case "FailNode":
		msg, _ := n.Inputs["message"].(string)
		return nil, errors.New(msg)
	case "PreviewNode":
		frames, stepMS, size := intInput(n, "frames", 3), intInput(n, "step_ms", 100), intInput(n, "size", 4)
		e.p.mu.Lock()
		fixed := e.p.sw.PreviewImage
		e.p.mu.Unlock()
		for i := 0; i < frames; i++ {
			img := fixed
			if img == nil {
				img = previewPNG(uint8(i*40), size)
			}
			e.p.sendBinary(e.pr.clientID, func(meta bool) []byte { return previewFrame(meta, e.pr.id, id, img) })
			if !sleepCtx(ctx, time.Duration(stepMS)*time.Millisecond) {
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	return nil, fmt.Errorf("unknown node %s", n.ClassType)
}

// previewFrame encodes a binary preview: type 4 with metadata when the
// client announced supports_preview_metadata, else type 1 (PNG).
func previewFrame(meta bool, promptID, nodeID string, img []byte) []byte {
	var buf bytes.Buffer
	if !meta {
		_ = binary.Write(&buf, binary.BigEndian, uint32(1))
		_ = binary.Write(&buf, binary.BigEndian, uint32(2))
		buf.Write(img)
		return buf.Bytes()
	}
	m, _ := json.Marshal(map[string]any{"node_id": nodeID, "prompt_id": promptID, "display_node_id": nodeID,
		"parent_node_id": nil, "real_node_id": nodeID, "image_type": "image/png"})
	_ = binary.Write(&buf, binary.BigEndian, uint32(4))
	_ = binary.Write(&buf, binary.BigEndian, uint32(len(m)))
	buf.Write(m)
	buf.Write(img)
	return buf.Bytes()
}

// previewPNG is a size×size preview: one shade with a red corner, and
// above 4 pixels noise on top, so that its PNG is as large as a real
// sampler preview of that size (a preview that compresses to nothing would
// not fill a slow client's buffers like real ones do).
func previewPNG(shade uint8, size int) []byte {
	im := image.NewRGBA(image.Rect(0, 0, size, size))
	noise := rand.New(rand.NewPCG(uint64(shade), uint64(size)))
	for i := range im.Pix {
		im.Pix[i] = shade
		if size > 4 {
			im.Pix[i] ^= uint8(noise.Uint32())
		}
	}
	im.Set(0, 0, color.RGBA{255, 0, 0, 255})
	var buf bytes.Buffer
	_ = png.Encode(&buf, im)
	return buf.Bytes()
}

func intInput(n node, name string, def int) int {
	if f, ok := n.Inputs[name].(float64); ok {
		return int(f)
	}
	return def
}

func builtinPrompt(nodes map[string]node) map[string]builtin.Node {
	out := make(map[string]builtin.Node, len(nodes))
	for id, n := range nodes {
		out[id] = builtin.Node{ClassType: n.ClassType, Inputs: n.Inputs}
	}
	return out
}
