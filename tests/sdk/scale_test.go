package sdk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/fleet/provisioner"
	"github.com/comfygate/comfygate/tests/gateway"
	comfyuipeer "github.com/comfygate/comfygate/tests/peers/comfyui"
)

// TestOfficialSDKScaleFromZero (issue 29, acceptance 2): a serverless
// deployment whose comfyui pool is at zero answers its first submission
// 429 deployment_not_ready with a Retry-After and counts it as demand; the
// test provisioner, following the scale signal, starts a ComfyUI peer
// (3 s cold start) and adds it; the official SDK's submit retries on the
// 429 and its job runs to succeeded. The pool then returns to zero, where
// (issue 40, acceptance 1) the SDK reads the finished job, its outputs and
// its event stream from storage, every answer 2xx, and the scale signal
// stays at 0 workers: the reads are no demand.
func TestOfficialSDKScaleFromZero(t *testing.T) {
	requireSDK(t)
	dir := t.TempDir()
	admin := fmt.Sprintf("127.0.0.1:%d", gateway.FreePort(t))
	cfg := `{
	admin ` + admin + `
	grace_period 1s
	comfygate {
		storage postgres "` + pgtest.DSN(t) + `"
		blobs file_system ./data/blobs
		pool gpu comfyui {
			scale {
				max_workers 2
				scale_down_delay 2s
				retry_after_max 30s
			}
			unhealthy_after 5s
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
		comfy_auth api_keys
		idempotency
		comfy_assets
		comfy_jobs
		error "not found" 404
	}
}
`
	g := gateway.Start(t, cfg, gateway.Options{Dir: dir})
	cfgPath := filepath.Join(dir, fmt.Sprintf("Caddyfile.%d", g.Port))
	cli := func(args ...string) string {
		cmd := exec.Command(gateway.Binary(t), args...)
		cmd.Dir = dir
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "create", "acme-zero", "--account", "acme", "--pool", "gpu")
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "state", "acme-zero", "ready")
	key := cli("api-key", "--config", cfgPath, "--adapter", "caddyfile", "create", "--account", "acme")
	base := g.URL + "/deployment/acme-zero"

	// The first submission: 429 deployment_not_ready with Retry-After.
	submit := func() *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, base+"/api/v2/jobs",
			strings.NewReader(`{"workflow": {"1": {"class_type": "TextOutput", "inputs": {"text": "refused"}}}}`))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := submit(); resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "2" {
		t.Fatalf("first submission: %d Retry-After %q, want 429 with the configured 2 (no cold start measured yet)",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	// The SDK submits first; the provisioner starts once the SDK has been
	// refused (zero.test.mjs writes refusedFile), so that its first submit
	// always finds the pool at zero, however long node takes to start.
	start := time.Now()
	jobFile, refusedFile := filepath.Join(dir, "job-id"), filepath.Join(dir, "refused")
	env := []string{"COMFY_BASE_URL=" + base, "COMFY_API_KEY=" + key, "COMFYGATE_JOB_FILE=" + jobFile,
		"COMFYGATE_REFUSED_FILE=" + refusedFile}
	sdkDone := make(chan struct{})
	var sdkErr error
	go func() { defer close(sdkDone); sdkErr = nodeTests(t, env, filepath.Join("scale", "zero.test.mjs")) }()
	for {
		if _, err := os.Stat(refusedFile); err == nil {
			break
		}
		select {
		case <-sdkDone:
			t.Fatalf("the SDK's test ended before it was refused: %v", sdkErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
	prov := provisioner.Start(t, provisioner.Config{Admin: "http://" + admin, Pool: "gpu",
		Peer: comfyuipeer.Options{ColdStart: 3 * time.Second}})
	<-sdkDone
	if sdkErr != nil {
		t.Fatal(sdkErr)
	}
	took := time.Since(start)
	_, _, most, started, _ := prov.Stats()
	if started != 1 || most != 1 {
		t.Errorf("the provisioner started %d workers (at most %d at once), want 1", started, most)
	}
	t.Logf("the SDK's job succeeded %s after the first 429 (a 3 s cold start)", took.Round(100*time.Millisecond))

	// Idle: after the scale-down delay the signal is 0 and the provisioner
	// stops its worker.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, running, _, _, stopped := prov.Stats()
		if running == 0 && stopped == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not return to zero: %d running, %d stopped", running, stopped)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// At zero (the hold over): the SDK reads the finished job from
	// storage; nothing asks for a worker.
	waitSignal(t, admin, "gpu", func(s scaleSignal) bool { return s.DesiredWorkers == 0 })
	jobID, err := os.ReadFile(jobFile)
	if err != nil {
		t.Fatal(err)
	}
	runNodeTests(t, append(env, "COMFYGATE_JOB_ID="+string(jobID)), filepath.Join("scale", "reads.test.mjs"))
	if s := readSignal(t, admin, "gpu"); s.DesiredWorkers != 0 || s.DemandUnmet {
		t.Errorf("after the reads at zero the signal is %+v, want 0 desired workers and no demand", s)
	}
	if _, running, _, started, _ := prov.Stats(); started != 1 || running != 0 {
		t.Errorf("after the reads at zero the provisioner runs %d workers, started %d in all; want 0 and 1", running, started)
	}

	// A submission at zero again: its Retry-After is the measured cold
	// start (the 3 s boot, the dial and the provisioner's poll), not the
	// configured 2 s, and it is demand.
	resp := submit()
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if resp.StatusCode != http.StatusTooManyRequests || ra < 3 || ra > 10 {
		t.Fatalf("at zero again: %d Retry-After %q, want 429 with the measured cold start (3–10 s)",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if s := readSignal(t, admin, "gpu"); s.DesiredWorkers != 1 || !s.DemandUnmet {
		t.Errorf("after a submission at zero the signal is %+v, want 1 desired worker for the unmet demand", s)
	}
	t.Logf("at zero again: 429 with Retry-After %d (the measured cold start)", ra)
}

// scaleSignal is what the test reads of GET /comfygate/scale/<pool>.
type scaleSignal struct {
	DesiredWorkers int  `json:"desiredWorkers"`
	DemandUnmet    bool `json:"demandUnmet"`
}

func readSignal(t *testing.T, admin, pool string) scaleSignal {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/comfygate/scale/" + pool)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s scaleSignal
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scale signal: %d %v", resp.StatusCode, err)
	}
	return s
}

// waitSignal polls the pool's signal until ok holds, for at most 30 s.
func waitSignal(t *testing.T, admin, pool string, ok func(scaleSignal) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for s := readSignal(t, admin, pool); !ok(s); s = readSignal(t, admin, pool) {
		if time.Now().After(deadline) {
			t.Fatalf("the scale signal is still %+v", s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
