// Package comfyui tests a real gateway process whose jobs run on a pool of
// two test ComfyUI peers (tests/peers/comfyui).
package comfyui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// stack is a gateway in front of two peers.
type stack struct {
	g     *gateway.Gateway
	peers []*comfyuipeer.Peer
}

// Config is the gateway's Caddyfile over the peers' URLs: pool gpu of kind
// comfyui, submitted to by comfy_jobs gpu.
func Config(urls ...string) string {
	workers := make([]workerBlock, len(urls))
	for i, u := range urls {
		workers[i] = workerBlock{URL: u}
	}
	return configWith(workers)
}

// workerBlock is one worker line of the pool: its URL and, when set, the
// input_dir the gateway removes staged inputs from.
type workerBlock struct {
	URL, InputDir string
}

func configWith(blocks []workerBlock) string { return configWithBlobs(blocks, "") }

// configWithBlobs is configWith with a blobs option (empty: the default
// file_system store under ./data).
func configWithBlobs(blocks []workerBlock, blobs string) string {
	var workers strings.Builder
	for _, w := range blocks {
		fmt.Fprintf(&workers, "\t\t\tworker %s {\n\t\t\t\tconcurrency 1\n", w.URL)
		if w.InputDir != "" {
			fmt.Fprintf(&workers, "\t\t\t\tinput_dir %q\n", w.InputDir)
		}
		workers.WriteString("\t\t\t}\n")
	}
	return gateway.V2Config(`storage embedded ./data
		`+blobs+`
		jobs {
			lease 5s
			max_attempts 2
		}
		pool gpu comfyui {
`+workers.String()+`			refresh 1m
			unhealthy_after 3s
			reconnect_max 1s
		}`, gateway.V2Site{Pool: "gpu"})
}

func startStack(t *testing.T) *stack {
	t.Helper()
	s := &stack{peers: []*comfyuipeer.Peer{comfyuipeer.New(t, comfyuipeer.Options{}), comfyuipeer.New(t, comfyuipeer.Options{})}}
	s.g = gateway.Start(t, Config(s.peers[0].URL, s.peers[1].URL), gateway.Options{})
	return s
}

// startStackWithInputDirs is startStack with peers that keep their inputs
// as files in dirs, and a gateway whose workers have those as input_dir.
func startStackWithInputDirs(t *testing.T) (s *stack, dirs []string) {
	t.Helper()
	s = &stack{}
	var blocks []workerBlock
	for range 2 {
		dir := t.TempDir()
		p := comfyuipeer.New(t, comfyuipeer.Options{InputDir: dir})
		s.peers = append(s.peers, p)
		dirs = append(dirs, dir)
		blocks = append(blocks, workerBlock{URL: p.URL, InputDir: dir})
	}
	s.g = gateway.Start(t, configWith(blocks), gateway.Options{})
	return s, dirs
}

// running returns the peer executing a prompt now, or nil.
func (s *stack) running() *comfyuipeer.Peer {
	for _, p := range s.peers {
		if p.Running() != "" {
			return p
		}
	}
	return nil
}

// uploadAsset uploads a PNG as the caller's asset and returns its id.
func uploadAsset(t *testing.T, g *gateway.Gateway, data []byte, filePath string) string {
	t.Helper()
	r := gateway.Upload(t, http.DefaultClient, g.URL, data, filePath, "image/png", map[string]string{"Idempotency-Key": uuid.NewString()})
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("upload: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func submit(t *testing.T, g *gateway.Gateway, wf any) gateway.Response {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"workflow": wf})
	return gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(raw),
		map[string]string{"Content-Type": "application/json", "Idempotency-Key": uuid.NewString()})
}

// submitOK submits and returns the job id.
func submitOK(t *testing.T, g *gateway.Gateway, wf any) string {
	t.Helper()
	r := submit(t, g, wf)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)["id"].(string)
}

func getJob(t *testing.T, g *gateway.Gateway, id string) map[string]any {
	t.Helper()
	r := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+id, nil, nil)
	if r.Status != http.StatusOK {
		t.Fatalf("GET job: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)
}

// until polls cond for at most a minute.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func node(class string, inputs map[string]any) map[string]any {
	return map[string]any{"class_type": class, "inputs": inputs}
}

// slowText is a SlowNode of steps×stepMS followed by a text output.
func slowText(steps, stepMS int, text string) map[string]any {
	return map[string]any{
		"1": node("SlowNode", map[string]any{"steps": steps, "step_ms": stepMS}),
		"2": node("TextOutput", map[string]any{"text": text}),
	}
}
