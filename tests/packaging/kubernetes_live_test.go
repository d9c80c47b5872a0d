package packaging

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/s3test"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestKubernetesGatewayServes runs the real gateway on the ConfigMap's
// Caddyfile, with the Deployment's environment, against the test Postgres,
// Redis and S3 bucket: the probes' paths answer 200 on the port the probes
// use, the internal site serves the ScaledObject's URL with the field its
// valueLocation names and the metric the HPA reads, and nothing of the
// admin API. The fixed ports (the site's, the internal :9180 and the admin
// endpoint's) move to free loopback ones, so that no other process here
// can answer for them.
func TestKubernetesGatewayServes(t *testing.T) {
	c := loadCluster(t)
	body, err := os.ReadFile(c.caddyfile)
	if err != nil {
		t.Fatal(err)
	}
	internalPort, adminPort := gateway.FreePort(t), gateway.FreePort(t)
	internalSite := fmt.Sprintf(":%d {", c.containerPort(t, "internal"))
	if !strings.Contains(string(body), "\n"+internalSite+"\n") || !strings.Contains(string(body), c.cfg.Admin.Listen) {
		t.Fatalf("the Caddyfile has no site %q or no admin address %s to move", internalSite, c.cfg.Admin.Listen)
	}
	cfg := strings.NewReplacer("\n"+internalSite+"\n", fmt.Sprintf("\nhttp://127.0.0.1:%d {\n", internalPort),
		c.cfg.Admin.Listen, fmt.Sprintf("127.0.0.1:%d", adminPort)).Replace(string(body))

	bucket := s3test.Bucket(t)
	env := []string{
		"COMFYGATE_SITE=http://127.0.0.1:{PORT}",
		"COMFYGATE_POSTGRES_DSN=" + pgtest.DSN(t),
		"COMFYGATE_REDIS_URL=" + pgtest.RedisURL(t),
		"COMFYGATE_S3_ENDPOINT=" + bucket.Endpoint,
		"COMFYGATE_S3_BUCKET=" + bucket.Bucket,
		"COMFYGATE_S3_REGION=" + bucket.Region,
		"COMFYGATE_S3_ACCESS_KEY=" + bucket.AccessKey,
		"COMFYGATE_S3_SECRET_KEY=" + bucket.SecretKey,
	}
	for name := range c.env {
		if !strings.HasPrefix(name, "COMFYGATE_") {
			t.Errorf("the Deployment sets %s, which this test does not stand for", name)
		}
	}
	port := gateway.FreePort(t)
	for i, e := range env {
		env[i] = strings.ReplaceAll(e, "{PORT}", fmt.Sprint(port))
	}
	g := gateway.Start(t, cfg, gateway.Options{Port: port, Env: env})

	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, p := range []string{c.container.ReadinessProbe.HTTPGet.Path, c.container.LivenessProbe.HTTPGet.Path} {
		if code, b := get(g.URL + p); code != http.StatusOK {
			t.Errorf("probe %s: %d %s\n%s", p, code, b, g.Logs())
		}
	}

	so := find[*scaledObject](t, c.objs, "comfyui-gpu")
	md := so.Spec.Triggers[0].Metadata
	path := md["url"][strings.Index(md["url"], "/comfygate/"):]
	internal := fmt.Sprintf("http://127.0.0.1:%d", internalPort)
	code, b := get(internal + path)
	var signal map[string]any
	if code != http.StatusOK || json.Unmarshal([]byte(b), &signal) != nil {
		t.Fatalf("GET %s on the internal site: %d %s", path, code, b)
	}
	if v, ok := signal[md["valueLocation"]].(float64); !ok || v < 0 {
		t.Errorf("the scale signal's %s is %v, not a count: %s", md["valueLocation"], signal[md["valueLocation"]], b)
	}
	if code, b := get(internal + "/metrics"); code != http.StatusOK || !strings.Contains(b, `comfygate_pool_desired_workers{pool="gpu"}`) {
		t.Errorf("the internal site's /metrics: %d, without comfygate_pool_desired_workers{pool=\"gpu\"}", code)
	}
	// Nothing else of the admin endpoint: its config, the workers API.
	for _, p := range []string{"/config/", "/comfygate/workers/gpu", "/comfygate/scale/../../config/", "/load"} {
		if code, _ := get(internal + p); code != http.StatusNotFound {
			t.Errorf("GET %s on the internal site: %d, want 404", p, code)
		}
	}
	resp, err := http.Post(internal+"/comfygate/workers/gpu", "application/json", strings.NewReader(`{"url":"http://127.0.0.1:1"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST /comfygate/workers/gpu on the internal site: %d, want 404", resp.StatusCode)
	}
	// The admin endpoint itself serves the same signal (the proxy's upstream).
	if code, _ := get(fmt.Sprintf("http://127.0.0.1:%d%s", adminPort, path)); code != http.StatusOK {
		t.Errorf("the admin endpoint answers %s with %d", path, code)
	}
}
