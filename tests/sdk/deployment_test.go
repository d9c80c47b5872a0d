package sdk

import (
	"bytes"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestOfficialSDKDeployment runs the official SDK against a deployment of
// a gateway started from the serverless example (Postgres and Redis),
// addressed by its /deployment/<id> prefix.
func TestOfficialSDKDeployment(t *testing.T) {
	root := gateway.RepoRoot(t)
	requireSDK(t)
	example, err := os.ReadFile(filepath.Join(root, "caddyfile-examples", "serverless.Caddyfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The example as an operator runs it, with admin off and a short grace
	// period so that it neither collides with nor holds up anything here.
	cfg := strings.Replace(string(example), "{\n", "{\n\tadmin off\n", 1)
	cfg = strings.Replace(cfg, "grace_period 30s", "grace_period 1s", 1)
	dir := t.TempDir()
	port := gateway.FreePort(t)
	env := []string{
		"COMFYGATE_POSTGRES_DSN=" + pgtest.DSN(t),
		"COMFYGATE_REDIS_URL=" + pgtest.RedisURL(t),
		"COMFYGATE_BLOB_DIR=" + filepath.Join(dir, "blobs"),
		fmt.Sprintf("COMFYGATE_HTTP_PORT=%d", port),
		fmt.Sprintf("COMFYGATE_HTTPS_PORT=%d", gateway.FreePort(t)),
		"COMFYGATE_DEPLOYMENT_DOMAINS=run.example.test stg.run.example.test",
	}
	g := gateway.Start(t, cfg, gateway.Options{Port: port, Dir: dir, Env: env})
	cfgPath := filepath.Join(dir, fmt.Sprintf("Caddyfile.%d", port))
	cli := func(args ...string) string {
		cmd := exec.Command(gateway.Binary(t), args...)
		cmd.Dir, cmd.Env = dir, append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v\n%s", args, err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "create", "acme-sdk", "--account", "acme", "--pool", "shared")
	cli("deployment", "--config", cfgPath, "--adapter", "caddyfile", "state", "acme-sdk", "ready")
	key := cli("api-key", "--config", cfgPath, "--adapter", "caddyfile", "create", "--account", "acme")
	runNodeTests(t, []string{"COMFY_BASE_URL=" + g.URL + "/deployment/acme-sdk", "COMFY_API_KEY=" + key},
		filepath.Join("deployment", "deployment.test.mjs"))
	hostFlow(t, g, "acme-sdk.run.example.test", key)
}

// hostFlow is the same flow by host, the requests curl sends with
// -H 'Host: <host>' to the gateway's address: upload, submit the invert
// graph, read its event stream to the end, download the output by the
// link the job carries. Links are absolute on that host, with no prefix.
func hostFlow(t *testing.T, g *gateway.Gateway, host, key string) {
	t.Helper()
	send := func(method, path, contentType string, body io.Reader) gateway.Response {
		req, err := http.NewRequest(method, g.URL+path, body)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+key)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		data, _ := io.ReadAll(resp.Body)
		return gateway.Response{Status: resp.StatusCode, Header: resp.Header, Body: data}
	}
	origin := "http://" + host
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	_ = mw.WriteField("content_type", "image/png")
	_ = mw.WriteField("file_path", "host_input.png")
	fw, _ := mw.CreateFormFile("file", "host_input.png")
	fw.Write(gateway.GradientPNG(t, 16))
	mw.Close()
	up := send(http.MethodPost, "/api/v2/assets", mw.FormDataContentType(), &form)
	if up.Status != http.StatusCreated || !strings.HasPrefix(up.JSON(t)["url"].(string), origin+"/api/v2/assets/") {
		t.Fatalf("upload by host: %d %s", up.Status, up.Body)
	}
	wf := `{"workflow": {"1": {"class_type": "LoadImage", "inputs": {"image": "host_input.png"}},
		"2": {"class_type": "ImageInvert", "inputs": {"image": ["1", 0]}},
		"3": {"class_type": "SaveImage", "inputs": {"filename_prefix": "host", "images": ["2", 0]}}}}`
	sub := send(http.MethodPost, "/api/v2/jobs", "application/json", strings.NewReader(wf))
	if sub.Status != http.StatusCreated {
		t.Fatalf("submit by host: %d %s", sub.Status, sub.Body)
	}
	urls := sub.JSON(t)["urls"].(map[string]any)
	self := urls["self"].(string)
	if !strings.HasPrefix(self, origin+"/api/v2/jobs/") || urls["events"] != self+"/events" {
		t.Fatalf("links by host: %v", urls)
	}
	events, err := gateway.ParseEvents(bytes.NewReader(send(http.MethodGet, strings.TrimPrefix(urls["events"].(string), origin), "", nil).Body), nil)
	if err != nil || len(events) == 0 || events[len(events)-1].Data["status"] != "succeeded" {
		t.Fatalf("events by host: %d, %v", len(events), err)
	}
	job := send(http.MethodGet, strings.TrimPrefix(self, origin), "", nil).JSON(t)
	out := job["outputs"].([]any)[0].(map[string]any)["url"].(string)
	if !strings.HasPrefix(out, origin+"/api/v2/assets/") {
		t.Fatalf("output link by host: %s", out)
	}
	got := send(http.MethodGet, strings.TrimPrefix(out, origin), "", nil)
	if got.Status != http.StatusOK || got.Header.Get("Content-Type") != "image/png" {
		t.Errorf("download by host: %d %s", got.Status, got.Header.Get("Content-Type"))
	}
	if _, ok := job["logs"]; !ok {
		t.Error("the deployment's GET by host carries no run log")
	}
}
