package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestConsoleShowsRunLog: the console's job detail carries the run log of a
// serverless deployment's job once it has ended, and none for a job that
// has no log; another account's job is read by its account.
func TestConsoleShowsRunLog(t *testing.T) {
	t.Parallel()
	g := gateway.Start(t, `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
	}
}
http://:{PORT} {
	bind 127.0.0.1
	handle_path /console/* {
		error_envelope
		comfy_console {
			token `+consoleToken+`
		}
	}
	route {
		error_envelope
		comfy_deployment {
			domains run.example.test
		}
		comfy_auth api_keys
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`, gateway.Options{})
	cli(t, g, "deployment", "create", "acme-logs", "--account", "acme")
	cli(t, g, "deployment", "state", "acme-logs", "ready")
	key := gateway.CreateAPIKey(t, g, "acme")

	raw, _ := json.Marshal(map[string]any{"workflow": map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "log", "images": []any{"1", 0}})}})
	r := gateway.Do(t, http.MethodPost, g.URL+"/deployment/acme-logs/api/v2/jobs", bytes.NewReader(raw),
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + key})
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	deadline := time.Now().Add(time.Minute)
	for {
		d := detail(t, g, "acme", id)
		job := d["job"].(map[string]any)
		if job["status"] == "succeeded" {
			l, ok := d["log"].(map[string]any)
			if !ok || !strings.Contains(l["text"].(string), "Prompt executed") || l["truncated"] != false {
				t.Fatalf("the console's detail of a finished deployment job: log %v", d["log"])
			}
			break
		}
		if _, has := d["log"]; has {
			t.Fatalf("a log before the job ended (status %v)", job["status"])
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job is still %v", job["status"])
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r := gateway.Do(t, http.MethodGet, g.URL+"/console/api/jobs/other/"+id, nil,
		map[string]string{"Authorization": "Bearer " + consoleToken}); r.Status != http.StatusNotFound {
		t.Errorf("the job under another account: %d %s", r.Status, r.Body)
	}
}

func detail(t *testing.T, g *gateway.Gateway, account, id string) map[string]any {
	t.Helper()
	r := gateway.Do(t, http.MethodGet, g.URL+"/console/api/jobs/"+account+"/"+id, nil,
		map[string]string{"Authorization": "Bearer " + consoleToken})
	if r.Status != http.StatusOK {
		t.Fatalf("console job detail: %d %s", r.Status, r.Body)
	}
	return r.JSON(t)
}

// cli runs the binary's operator commands against the gateway's config.
func cli(t *testing.T, g *gateway.Gateway, args ...string) {
	t.Helper()
	cfgs, _ := filepath.Glob(filepath.Join(g.Dir, "Caddyfile.*"))
	cmd := exec.Command(gateway.Binary(t), append([]string{args[0], "--config", cfgs[0], "--adapter", "caddyfile"}, args[1:]...)...)
	cmd.Dir = g.Dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", args, err, out)
	}
}
