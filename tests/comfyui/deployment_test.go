package comfyui

import (
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// startGPUDeployment starts a gateway of deploymentConfig over peer and
// creates the ready deployment gpu-dep on its pool; it returns the
// deployment's base.
func startGPUDeployment(t *testing.T, peer *comfyuipeer.Peer) *gateway.Gateway {
	t.Helper()
	g := gateway.Start(t, deploymentConfig(peer.URL), gateway.Options{})
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	for _, args := range [][]string{{"create", "gpu-dep", "--account", "local", "--pool", "gpu"}, {"state", "gpu-dep", "ready"}} {
		cmd := exec.Command(gateway.Binary(t), append([]string{"deployment", "--config", cfgs[0], "--adapter", "caddyfile"}, args...)...)
		cmd.Dir = g.Dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("deployment %v: %v\n%s", args, err, out)
		}
	}
	return &gateway.Gateway{URL: g.URL + "/deployment/gpu-dep"}
}

// TestDeploymentOnComfyUIPool: a deployment's job on a ComfyUI pool keeps
// what the worker printed during its run (from ComfyUI's log stream) as
// its run log, capped at 1 MiB; once the pool has no healthy worker the
// deployment refuses submissions (deployment_not_ready) and still serves
// what storage holds.
func TestDeploymentOnComfyUIPool(t *testing.T) {
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	base := startGPUDeployment(t, peer)
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

	// No healthy worker: a submission is not ready; the finished job is
	// still read, listed and streamed from storage.
	peer.Crash()
	until(t, "deployment_not_ready", func() bool {
		r := submit(t, base, slowText(1, 1, "at zero"))
		return r.Status == http.StatusTooManyRequests && strings.Contains(string(r.Body), "deployment_not_ready") &&
			r.Header.Get("Retry-After") == "2"
	})
	readsFromStorage(t, base, id)
}

// readsFromStorage checks that the succeeded job id, its outputs, the
// list and the job's event stream are served.
func readsFromStorage(t *testing.T, base *gateway.Gateway, id string) {
	t.Helper()
	j := getJob(t, base, id)
	if j["status"] != "succeeded" {
		t.Fatalf("job %s at zero: %v", id, j["status"])
	}
	for _, path := range []string{"/api/v2/jobs", "/api/v2/jobs/" + id + "/workflow"} {
		if r := gateway.Do(t, http.MethodGet, base.URL+path, nil, nil); r.Status != http.StatusOK {
			t.Errorf("GET %s at zero: %d %s", path, r.Status, r.Body)
		}
	}
	outputs, _ := j["outputs"].([]any)
	if len(outputs) == 0 {
		t.Fatalf("job %s has no outputs: %v", id, j)
	}
	for _, o := range outputs {
		out := o.(map[string]any)
		if r := gateway.Do(t, http.MethodGet, out["url"].(string), nil, nil); r.Status != http.StatusOK {
			t.Errorf("output %s at zero: %d %s", out["id"], r.Status, r.Body)
		}
		if r := gateway.Do(t, http.MethodGet, base.URL+"/api/v2/assets/"+out["id"].(string), nil, nil); r.Status != http.StatusOK {
			t.Errorf("asset %s at zero: %d %s", out["id"], r.Status, r.Body)
		}
	}
	events := gateway.ReadEvents(t, base.URL+"/api/v2/jobs/"+id+"/events", 10*time.Second)
	if last := events[len(events)-1]; last.Name != "status" || last.Data["status"] != "succeeded" {
		t.Errorf("the finished job's stream at zero ends with %v", last)
	}
}

// TestDeploymentWhileItsOnlyWorkerDrains: the pool's only worker announces
// its shutdown while it runs a job and another waits in the queue. The
// deployment refuses what needs a worker that takes jobs (a submission,
// the queued job's event stream: 429 deployment_not_ready) and serves the
// rest: reads from storage, the running job's stream to its end (the
// draining worker finishes it), a cancel of the queued job.
func TestDeploymentWhileItsOnlyWorkerDrains(t *testing.T) {
	peer := comfyuipeer.New(t, comfyuipeer.Options{})
	base := startGPUDeployment(t, peer)
	done := submitOK(t, base, slowText(1, 1, "done before the drain"))
	gateway.WaitJob(t, base.URL, done, 30*time.Second, func(s string) bool { return s == "succeeded" })
	running := submitOK(t, base, slowText(80, 100, "finished by the draining worker"))
	gateway.WaitJob(t, base.URL, running, 30*time.Second, func(s string) bool { return s == "running" })
	// "running" is the lease; the worker has the prompt only once /prompt
	// was answered (a drain before that hands the job on).
	until(t, "the worker runs the long prompt", func() bool { return peer.Running() != "" })
	queued := submitOK(t, base, slowText(1, 1, "waits"))

	peer.Shutdown(time.Minute) // it finishes its queue, then lingers
	notReady := func(r gateway.Response) bool {
		return r.Status == http.StatusTooManyRequests && strings.Contains(string(r.Body), "deployment_not_ready") &&
			r.Header.Get("Retry-After") == "2"
	}
	until(t, "the queued job's stream refused", func() bool {
		return notReady(gateway.Do(t, http.MethodGet, base.URL+"/api/v2/jobs/"+queued+"/events", nil, nil))
	})
	if r := submit(t, base, slowText(1, 1, "refused")); !notReady(r) {
		t.Errorf("a submission while the only worker drains: %d %s", r.Status, r.Body)
	}
	if j := getJob(t, base, running); j["status"] != "running" {
		t.Fatalf("the long job is %v before its stream is read; the draining case is not exercised", j["status"])
	}
	events := gateway.ReadEvents(t, base.URL+"/api/v2/jobs/"+running+"/events", time.Minute)
	if last := events[len(events)-1]; last.Name != "status" || last.Data["status"] != "succeeded" {
		t.Errorf("the running job's stream ends with %v, want its succeeded status", last)
	}
	readsFromStorage(t, base, done)
	if j := getJob(t, base, queued); j["status"] != "queued" {
		t.Errorf("the queued job is %v", j["status"])
	}
	r := gateway.Do(t, http.MethodPost, base.URL+"/api/v2/jobs/"+queued+"/cancel", nil, nil)
	if r.Status != http.StatusOK || r.JSON(t)["status"] != "canceled" {
		t.Errorf("cancel of the queued job while the worker drains: %d %s", r.Status, r.Body)
	}
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
