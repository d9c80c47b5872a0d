package comfyui

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// deploymentConfig serves deployments (by /deployment/{id}) whose jobs run
// on a comfyui pool over the peer; callers are the local account.
func deploymentConfig(peerURL string) string {
	return `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
		pool gpu comfyui {
			worker ` + peerURL + ` {
				concurrency 1
			}
			unhealthy_after 2s
			reconnect_max 500ms
		}
	}
}

http://:{PORT} {
	bind 127.0.0.1
	route {
		error_envelope
		comfy_deployment {
			retry_after 2s
		}
		comfy_auth none
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
}

// TestDeploymentOnComfyUIPool: a deployment's job on a ComfyUI pool keeps
// what the worker printed during its run (from ComfyUI's log stream) as
// its run log, capped at 1 MiB; a deployment whose pool has no healthy
// worker is not ready.
func TestDeploymentOnComfyUIPool(t *testing.T) {
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	g := gateway.Start(t, deploymentConfig(peer.URL), gateway.Options{})
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	for _, args := range [][]string{{"create", "gpu-dep", "--account", "local", "--pool", "gpu"}, {"state", "gpu-dep", "ready"}} {
		cmd := exec.Command(gateway.Binary(t), append([]string{"deployment", "--config", cfgs[0], "--adapter", "caddyfile"}, args...)...)
		cmd.Dir = g.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deployment %v: %v\n%s", args, err, out)
		}
	}
	base := &gateway.Gateway{URL: g.URL + "/deployment/gpu-dep"}
	logOf := func(id string) map[string]any {
		var j map[string]any
		until(t, "the job's end", func() bool {
			j = getJob(t, base, id)
			return gateway.Terminal(j["status"].(string))
		})
		if j["status"] != "succeeded" {
			t.Fatalf("job %s: %v", j["status"], j["error"])
		}
		logs, ok := j["logs"].(map[string]any)
		if !ok {
			t.Fatalf("no run log on the finished job: %v", j)
		}
		return logs
	}

	id := submitOK(t, base, map[string]any{
		"1": node("PrintNode", map[string]any{"text": "loading model weights… 100%", "times": 2}),
		"2": node("TextOutput", map[string]any{"text": "done"}),
	})
	logs := logOf(id)
	text := logs["text"].(string)
	if !containsInOrder(text, "got prompt\n", "loading model weights… 100%\nloading model weights… 100%\n", "Prompt executed in ") ||
		logs["truncated"] != false {
		t.Errorf("run log = %v", logs)
	}

	// Over the cap: the head and the latest output are kept, marked truncated.
	line := strings.Repeat("x", 1000)
	id = submitOK(t, base, map[string]any{
		"1": node("PrintNode", map[string]any{"text": line, "times": 1200}),
		"2": node("TextOutput", map[string]any{"text": "done"}),
	})
	logs = logOf(id)
	text = logs["text"].(string)
	if logs["truncated"] != true || len(text) > 1<<20 || len(text) < 1<<20-2048 || !utf8.ValidString(text) ||
		!strings.HasPrefix(text, "got prompt\n") || !strings.Contains(text, "bytes of the run log left out") ||
		!strings.Contains(text[len(text)-200:], "Prompt executed in ") {
		t.Errorf("truncated run log: truncated=%v, %d bytes, starts %q, ends %q", logs["truncated"], len(text),
			text[:min(40, len(text))], text[max(0, len(text)-80):])
	}

	// No healthy worker: the deployment is not ready.
	peer.Crash()
	until(t, "deployment_not_ready", func() bool {
		r := gateway.Do(t, http.MethodGet, base.URL+"/api/v2/jobs", nil, nil)
		return r.Status == http.StatusTooManyRequests && strings.Contains(string(r.Body), "deployment_not_ready") &&
			r.Header.Get("Retry-After") == "2"
	})
}

func containsInOrder(s string, parts ...string) bool {
	for _, p := range parts {
		i := strings.Index(s, p)
		if i < 0 {
			return false
		}
		s = s[i+len(p):]
	}
	return true
}
