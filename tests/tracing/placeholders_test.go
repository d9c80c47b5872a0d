package tracing

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/comfygate/comfygate/tests/gateway"
)

// TestAccessLogPlaceholders (issue 30, acceptance 3): an access log whose
// log_append lines and a deferred header directive name
// {comfygate.account}, {comfygate.job_id} and {comfygate.deployment}
// names the account and the job each request served.
func TestAccessLogPlaceholders(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	accessLog := filepath.Join(dir, "access.log")
	cfg := `{
	admin off
	grace_period 1s
	comfygate {
		storage embedded ./data
	}
}
http://:{PORT} {
	bind 127.0.0.1
	log {
		output file ` + accessLog + `
		format json
	}
	log_append account {comfygate.account}
	log_append job_id {comfygate.job_id}
	header {
		defer
		X-Comfygate-Account {comfygate.account}
		X-Comfygate-Job {comfygate.job_id}
	}
	route {
		error_envelope
		comfy_auth api_keys
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
	key := gateway.CreateAPIKey(t, g, "acct-tracing")
	auth := map[string]string{"Authorization": "Bearer " + key}

	wf := map[string]any{
		"1": gateway.Node("EmptyImage", map[string]any{"width": 8, "height": 8, "batch_size": 1, "color": 0}),
		"2": gateway.Node("SaveImage", map[string]any{"filename_prefix": "p", "images": []any{"1", 0}}),
	}
	body, _ := json.Marshal(map[string]any{"workflow": wf})
	r := gateway.Do(t, http.MethodPost, g.URL+"/api/v2/jobs", bytes.NewReader(body), auth)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	if got := r.Header.Get("X-Comfygate-Account"); got != "acct-tracing" {
		t.Errorf("X-Comfygate-Account = %q, want acct-tracing", got)
	}
	if got := r.Header.Get("X-Comfygate-Job"); got != id {
		t.Errorf("X-Comfygate-Job = %q, want %s", got, id)
	}
	if g := gateway.Do(t, http.MethodGet, g.URL+"/api/v2/jobs/"+id, nil, auth); g.Status != http.StatusOK {
		t.Fatalf("get: %d %s", g.Status, g.Body)
	}

	// Both requests' access log lines name the account and the job.
	deadline := time.Now().Add(10 * time.Second)
	for {
		lines := readAccessLog(t, accessLog)
		var named int
		for _, l := range lines {
			if l["account"] == "acct-tracing" && l["job_id"] == id {
				named++
			}
		}
		if named >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want 2 access log lines naming account acct-tracing and job %s; got %d of %d lines:\n%v", id, named, len(lines), lines)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func readAccessLog(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}
