package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// TestReloadKeepsRunningJobs: a config reload stops the old config from
// claiming but lets its running attempt finish; the job is not restarted.
func TestReloadKeepsRunningJobs(t *testing.T) {
	t.Parallel()
	dsn := pgtest.DSN(t)
	adminPort := gateway.FreePort(t)
	cfg := func(marker string) string {
		c := gateway.V2Config(clusterGlobal(dsn, pgtest.RedisURL(t), "\t\t\tconcurrency 1"),
			gateway.V2Site{Auth: "comfy_auth none", Admin: fmt.Sprintf("127.0.0.1:%d", adminPort)})
		return strings.Replace(c, "\tbind 127.0.0.1\n", "\tbind 127.0.0.1\n\theader X-Config "+marker+"\n", 1)
	}
	blobs := t.TempDir()
	g := gateway.Start(t, strings.ReplaceAll(cfg("first"), "{BLOBS}", blobs), gateway.Options{})

	r := submit(t, g, map[string]any{"workflow": slowWorkflow(4)}, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	gateway.WaitJob(t, g.URL, id, 30*time.Second, func(s string) bool { return s == "running" })

	next := strings.ReplaceAll(strings.ReplaceAll(cfg("second"), "{BLOBS}", blobs), "{PORT}", fmt.Sprint(g.Port))
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/load", adminPort), strings.NewReader(next))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
	if r := do(t, http.MethodGet, g.URL+"/nowhere", nil, nil); r.Header.Get("X-Config") != "second" {
		t.Fatalf("the new config is not serving (X-Config %q)", r.Header.Get("X-Config"))
	}
	done := gateway.WaitJob(t, g.URL, id, 120*time.Second, gateway.Terminal)
	if done["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", done["status"], done["error"])
	}
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var attempt int
	if err := conn.QueryRow(context.Background(), `SELECT attempt FROM jobs WHERE id = $1`, id).Scan(&attempt); err != nil {
		t.Fatal(err)
	}
	if attempt != 1 {
		t.Fatalf("the job ran %d attempts; the reload restarted it", attempt)
	}
}

// TestConfigWithoutAuthRefused: a config whose v2 handlers have no
// comfy_auth before them is refused by validate, by run and by a reload
// through the admin API, with the error each request would otherwise get;
// after the refused reload the old config keeps serving.
func TestConfigWithoutAuthRefused(t *testing.T) {
	t.Parallel()
	const want = "idempotency: no principal; put comfy_auth before idempotency"
	dir := t.TempDir()
	global := backends()[0].global(t, dir)
	withoutAuth := func(cfg string) string {
		out := strings.Replace(cfg, "\t\tcomfy_auth none\n", "", 1)
		if out == cfg {
			t.Fatalf("no comfy_auth line to remove in\n%s", cfg)
		}
		return out
	}
	port := gateway.FreePort(t)
	bad := filepath.Join(dir, "bad.Caddyfile")
	cfg := strings.ReplaceAll(withoutAuth(gateway.V2Config(global, gateway.V2Site{})), "{PORT}", fmt.Sprint(port))
	if err := os.WriteFile(bad, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{"validate", "run"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, gateway.Binary(t), command, "--config", bad, "--adapter", "caddyfile")
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || timedOut || !strings.Contains(string(out), want) {
			t.Errorf("%s of a config without comfy_auth: %v; want a failure with %q in:\n%s", command, err, want, out)
		}
	}

	adminPort := gateway.FreePort(t)
	good := gateway.V2Config(global, gateway.V2Site{Admin: fmt.Sprintf("127.0.0.1:%d", adminPort)})
	g := gateway.Start(t, good, gateway.Options{Dir: dir, Port: port})
	if r := do(t, http.MethodGet, g.URL+"/api/v2/jobs", nil, nil); r.Status != http.StatusOK {
		t.Fatalf("list jobs: %d %s", r.Status, r.Body)
	}
	next := strings.ReplaceAll(withoutAuth(good), "{PORT}", fmt.Sprint(g.Port))
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d/load", adminPort), strings.NewReader(next))
	req.Header.Set("Content-Type", "text/caddyfile")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK || !strings.Contains(string(body), want) {
		t.Errorf("reload without comfy_auth: %d %s; want it refused with %q", resp.StatusCode, body, want)
	}
	// The old config still serves, its auth and all.
	if r := do(t, http.MethodGet, g.URL+"/api/v2/jobs", nil, nil); r.Status != http.StatusOK {
		t.Errorf("list jobs after the refused reload: %d %s", r.Status, r.Body)
	}
	up := upload(t, g, nil, uploadParts(randomBytes(64), "after-reload.bin")...)
	if up.Status != http.StatusCreated {
		t.Errorf("upload after the refused reload: %d %s", up.Status, up.Body)
	}
}
