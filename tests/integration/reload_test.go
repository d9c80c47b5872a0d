package integration

import (
	"context"
	"fmt"
	"net/http"
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
