// Package comfyreal is the real-ComfyUI conformance suite of the worker
// pools: a gateway whose pool is two unmodified ComfyUI servers
// (realcomfy), whose outputs are compared with what the first of them
// writes when sent the same prompt directly.
// It skips when $COMFYGATE_COMFYUI_SRC is unset (tests/run sets it); the
// protocol peer (tests/peers/comfyui) covers what this ComfyUI lacks.
package comfyreal

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/internal/comfyui"
	"github.com/comfygate/comfygate/tests/comfyreal/realcomfy"
	"github.com/comfygate/comfygate/tests/gateway"
)

// stack is a gateway in front of two real ComfyUI servers.
type stack struct {
	g       *gateway.Gateway
	admin   string
	workers []*realcomfy.Server
}

func startStack(t *testing.T) *stack {
	t.Helper()
	src := realcomfy.Require(t)
	s := &stack{workers: src.Start(t, 2)}
	var workers strings.Builder
	for _, w := range s.workers {
		fmt.Fprintf(&workers, "\t\t\tworker %s {\n\t\t\t\tinput_dir %q\n\t\t\t}\n", w.URL, w.InputDir)
	}
	adminAddr := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	s.admin = "http://" + adminAddr
	// unhealthy_after is long on purpose: a killed worker must leave the
	// rotation at once, not after it.
	s.g = gateway.Start(t, gateway.V2Config(`storage embedded ./data
		jobs {
			lease 5s
			max_attempts 2
		}
		pool gpu comfyui {
`+workers.String()+`			refresh 1m
			unhealthy_after 2m
			reconnect_max 1s
		}`, gateway.V2Site{Pool: "gpu", Admin: adminAddr}), gateway.Options{})
	s.until(t, "both workers healthy", time.Minute, func() bool {
		ws := s.workerStates(t)
		return ws[s.workers[0].URL].Healthy && ws[s.workers[1].URL].Healthy
	})
	return s
}

func (s *stack) workerStates(t *testing.T) map[string]comfyui.WorkerState {
	t.Helper()
	return gateway.AdminWorkers(t, s.admin, "gpu")
}

func (s *stack) until(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// upload stores data as the caller's asset and returns its id.
func (s *stack) upload(t *testing.T, data []byte, name string) string {
	t.Helper()
	r := gateway.Upload(t, http.DefaultClient, s.g.URL, data, name, "image/png", map[string]string{"Idempotency-Key": uuid.NewString()})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func (s *stack) submit(t *testing.T, wf any) gateway.Response {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	return gateway.Do(t, http.MethodPost, s.g.URL+"/api/v2/jobs", bytes.NewReader(raw),
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": uuid.NewString()})
}

func (s *stack) submitOK(t *testing.T, wf any) string {
	t.Helper()
	r := s.submit(t, wf)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

// finish waits for a job to end and returns it.
func (s *stack) finish(t *testing.T, id string) map[string]any {
	t.Helper()
	return gateway.WaitJob(t, s.g.URL, id, 3*time.Minute, gateway.Terminal)
}

// output returns the bytes of the job's only output of node.
func (s *stack) output(t *testing.T, job map[string]any, node string) []byte {
	t.Helper()
	var found []byte
	n := 0
	outs, _ := job["outputs"].([]any)
	for _, o := range outs {
		om := o.(map[string]any)
		if om["node_id"] != node {
			continue
		}
		n++
		r := gateway.Do(t, http.MethodGet, s.g.URL+"/api/v2/assets/"+om["id"].(string)+"/content", nil, nil)
		if r.Status != http.StatusOK {
			t.Fatalf("output content: %d %s", r.Status, r.Body)
		}
		found = r.Body
	}
	if n != 1 {
		t.Fatalf("job %v has %d outputs of node %s, want 1: %v", job["id"], n, node, outs)
	}
	return found
}

// reference runs wf on the first worker directly, with input (if any)
// uploaded there as LoadImage node "1"'s image, and returns the bytes of
// node's only output file. Its prompt is then forgotten (its history entry
// deleted), and counts taken after it do not see it.
func (s *stack) reference(t *testing.T, wf map[string]any, input []byte, node string) []byte {
	t.Helper()
	ref := s.workers[0]
	direct := map[string]any{}
	for id, n := range wf {
		direct[id] = n
	}
	if input != nil {
		name := ref.Upload(t, "direct", uuid.NewString()+".png", input)
		direct["1"] = gateway.Node("LoadImage", map[string]any{"image": name})
	}
	h := ref.Run(t, direct, 3*time.Minute)
	defer ref.Forget(t, h.PromptID)
	if h.Status.StatusStr != "success" {
		t.Fatalf("the reference run: %+v", h.Status)
	}
	var files []realcomfy.FileRef
	for _, list := range h.Outputs[node] {
		files = append(files, list...)
	}
	if len(files) != 1 {
		t.Fatalf("the reference run's node %s output %v, want one file", node, h.Outputs[node])
	}
	// Its log line may come after the history entry: wait for it, so that
	// it is not counted with what follows.
	s.until(t, "the reference run logged", 30*time.Second, func() bool {
		return strings.Count(ref.Log(), "got prompt") == ref.Executions()
	})
	return ref.View(t, files[0])
}

// counts are what the workers' logs say they did so far.
type counts struct{ prompts, executed, interrupted int }

func (s *stack) counts() []counts {
	c := make([]counts, len(s.workers))
	for i, w := range s.workers {
		log := w.Log()
		c[i] = counts{strings.Count(log, "got prompt"), w.Executions(), strings.Count(log, "Processing interrupted")}
	}
	return c
}

// since is what the workers did together since before.
func (s *stack) since(before []counts) counts {
	var d counts
	for i, c := range s.counts() {
		d.prompts += c.prompts - before[i].prompts
		d.executed += c.executed - before[i].executed
		d.interrupted += c.interrupted - before[i].interrupted
	}
	return d
}

// onceEach checks that the workers received and executed exactly the
// prompts expected since before, and that none is left in the /history of
// a worker that is up: the gateway found every prompt it queued (and
// deleted its entry), so none ran without being followed. The inputs it
// staged there are gone too.
func (s *stack) onceEach(t *testing.T, before []counts, prompts, executed int) {
	t.Helper()
	s.until(t, "the workers to log every execution", 30*time.Second, func() bool { return s.since(before).executed >= executed })
	if d := s.since(before); d.prompts != prompts || d.executed != executed {
		t.Errorf("the workers got %d prompts and executed %d, want %d and %d", d.prompts, d.executed, prompts, executed)
	}
	for _, w := range s.workers {
		// The gateway removed what it staged (input_dir), on a dead worker too.
		if staged, _ := os.ReadDir(filepath.Join(w.InputDir, "comfygate")); len(staged) > 0 {
			t.Errorf("%d staged input folders left on %s", len(staged), w.URL)
		}
		if !w.Up() {
			continue
		}
		s.until(t, "an empty /history on "+w.URL, 30*time.Second, func() bool { return len(w.History(t)) == 0 })
	}
}

// running returns the worker whose /queue runs a prompt now, or nil.
func (s *stack) running(t *testing.T) *realcomfy.Server {
	t.Helper()
	for _, w := range s.workers {
		var q struct {
			Running []json.RawMessage `json:"queue_running"`
		}
		resp, err := http.Get(w.URL + "/queue")
		if err != nil {
			continue
		}
		err = json.NewDecoder(resp.Body).Decode(&q)
		resp.Body.Close()
		if err == nil && len(q.Running) > 0 {
			return w
		}
	}
	return nil
}

// other is the worker that is not w.
func (s *stack) other(w *realcomfy.Server) *realcomfy.Server {
	if s.workers[0] == w {
		return s.workers[1]
	}
	return s.workers[0]
}

// wroteOutputs reports whether the worker's output directory holds files
// of the job.
func wroteOutputs(w *realcomfy.Server, jobID string) bool {
	entries, err := os.ReadDir(filepath.Join(w.OutputDir, jobID))
	return err == nil && len(entries) > 0
}

// withoutText is a PNG without its text chunks (tEXt, zTXt, iTXt): the
// prompt ComfyUI embeds, which names the job's own file prefix and staged
// input. Everything else (header, pixels as compressed, end) is kept
// byte for byte.
func withoutText(t *testing.T, png []byte) []byte {
	t.Helper()
	const sig = "\x89PNG\r\n\x1a\n"
	if !bytes.HasPrefix(png, []byte(sig)) {
		t.Fatalf("not a PNG: %.16q", png)
	}
	out := append([]byte(nil), sig...)
	for rest := png[len(sig):]; len(rest) > 0; {
		if len(rest) < 12 {
			t.Fatal("a truncated PNG chunk")
		}
		n := int(binary.BigEndian.Uint32(rest))
		if len(rest) < 12+n {
			t.Fatal("a truncated PNG chunk")
		}
		chunk := rest[:12+n]
		switch string(chunk[4:8]) {
		case "tEXt", "zTXt", "iTXt":
		default:
			out = append(out, chunk...)
		}
		rest = rest[12+n:]
	}
	return out
}

// sameImage checks that the gateway's output equals the reference byte
// for byte, text chunks aside.
func sameImage(t *testing.T, got, want []byte) {
	t.Helper()
	if g, w := withoutText(t, got), withoutText(t, want); !bytes.Equal(g, w) {
		t.Errorf("the gateway's output (%d bytes) differs from ComfyUI's own (%d bytes)", len(g), len(w))
	}
}

// slowWorkflow scales the image to 512² and blurs it blurs times: a prompt
// of a few seconds on the CPU, with a node boundary (where ComfyUI checks
// for an interrupt) every few hundred milliseconds.
func slowWorkflow(asset string, blurs int) map[string]any {
	wf := map[string]any{
		"1": loadAsset(asset),
		"2": gateway.Node("ImageScale", map[string]any{"image": []any{"1", 0}, "upscale_method": "bilinear", "width": 512, "height": 512, "crop": "disabled"}),
	}
	prev := "2"
	for i := range blurs {
		id := fmt.Sprint(10 + i)
		wf[id] = gateway.Node("ImageBlur", map[string]any{"image": []any{prev, 0}, "blur_radius": 4, "sigma": 1.0})
		prev = id
	}
	wf["3"] = gateway.Node("SaveImage", map[string]any{"images": []any{prev, 0}, "filename_prefix": "slow"})
	return wf
}

func loadAsset(id string) map[string]any {
	return gateway.Node("LoadImage", map[string]any{"image": map[string]any{"__type": "core/ASSET", "info": map[string]any{"id": id}}})
}
