package integration

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redistest"
	"github.com/comfygate/comfygate/tests/gateway"
)

// clusterGlobal is the comfygate option of a gateway sharing dsn and redisURL.
func clusterGlobal(dsn, redisURL, jobs string) string {
	return fmt.Sprintf("storage postgres %q\n\t\tredis %q\n\t\tblobs file_system %q\n\t\tjobs {\n%s\n\t\t}",
		dsn, redisURL, "{BLOBS}", jobs)
}

// startMember starts one gateway of a cluster; every member shares one blob
// directory, as they would share a blob volume in production.
func startMember(t *testing.T, global, blobs string) *gateway.Gateway {
	t.Helper()
	return gateway.Start(t, siteConfig(strings.ReplaceAll(global, "{BLOBS}", blobs), "comfy_auth none"), gateway.Options{})
}

// TestStreamFromAnotherProcess: a job submitted to and streamed from an
// API-only gateway runs on another process; the stream sees it live. The
// events cross through Redis: one server, a Cluster or a Sentinel set.
func TestStreamFromAnotherProcess(t *testing.T) {
	t.Parallel()
	for _, tp := range redistest.Topologies(pgtest.RedisURL) {
		t.Run(tp.Name, func(t *testing.T) {
			t.Parallel()
			testStreamFromAnotherProcess(t, tp.URL(t))
		})
	}
}

func testStreamFromAnotherProcess(t *testing.T, rurl string) {
	dsn, blobs := pgtest.DSN(t), t.TempDir()
	worker := startMember(t, clusterGlobal(dsn, rurl, "\t\t\tconcurrency 1"), blobs)
	api := startMember(t, clusterGlobal(dsn, rurl, "\t\t\tno_execute"), blobs)
	_ = worker

	r := submit(t, api, map[string]any{"workflow": slowWorkflow(4)}, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	events := gateway.ReadEvents(t, api.URL+"/api/v2/jobs/"+id+"/events", 120*time.Second)
	if len(events) < 3 || events[0].Name != "status" {
		t.Fatalf("events: %v", names(events))
	}
	last := events[len(events)-1]
	if last.Name != "status" || last.Data["status"] != "succeeded" {
		t.Fatalf("last event %v %v", last.Name, last.Data["status"])
	}
	var progress, outputs int
	var lastValue float64
	for _, e := range events {
		switch e.Name {
		case "progress":
			progress++
			v := e.Data["value"].(float64)
			if v < lastValue {
				t.Errorf("progress went back from %v to %v", lastValue, v)
			}
			lastValue = v
		case "output":
			outputs++
		}
	}
	if progress == 0 || outputs != 1 {
		t.Errorf("saw %d progress and %d output events: %v", progress, outputs, names(events))
	}
}

func names(events []gateway.SSEEvent) []string {
	var n []string
	for _, e := range events {
		n = append(n, e.Name+":"+fmt.Sprint(e.Data["status"]))
	}
	return n
}

// TestKillReclaim: the process running a job dies (kill -9); another process
// reclaims the job after the lease and finishes it, with no duplicate outputs.
func TestKillReclaim(t *testing.T) {
	t.Parallel()
	dsn, rurl, blobs := pgtest.DSN(t), pgtest.RedisURL(t), t.TempDir()
	global := clusterGlobal(dsn, rurl, "\t\t\tconcurrency 1\n\t\t\tlease 2s")
	first := startMember(t, global, blobs)
	r := submit(t, first, map[string]any{"workflow": slowWorkflow(5)}, nil)
	if r.Status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.Status, r.Body)
	}
	id := r.JSON(t)["id"].(string)
	gateway.WaitJob(t, first.URL, id, 30*time.Second, func(s string) bool { return s == "running" })
	second := startMember(t, global, blobs)
	// The job must still be mid-run when its process dies, or nothing is
	// reclaimed and the test proves nothing.
	if j := gateway.WaitJob(t, second.URL, id, time.Second, func(string) bool { return true }); j["status"] != "running" {
		t.Fatalf("the job was %v before the kill; make the workflow slower", j["status"])
	}
	first.Kill()
	killedAt := time.Now()
	done := gateway.WaitJob(t, second.URL, id, 120*time.Second, gateway.Terminal)
	if done["status"] != "succeeded" {
		t.Fatalf("reclaimed job ended %v: %v", done["status"], done["error"])
	}
	t.Logf("finished %s after the kill", time.Since(killedAt))
	if outs := done["outputs"].([]any); len(outs) != 1 {
		t.Fatalf("outputs after reclaim: %v", outs)
	}
}

// TestOneJobPerKey: 100 concurrent submits with one Idempotency-Key create
// exactly one job, also when Redis (which holds the claims) is flushed
// halfway through; the database backstop holds.
func TestOneJobPerKey(t *testing.T) {
	t.Parallel()
	// A Redis database of its own, so the flush touches no other test.
	const db = 7
	rurl := fmt.Sprintf("redis://127.0.0.1:6379/%d", db)
	pgtest.RedisURL(t) // fails the test clearly when Redis is down
	g := startMember(t, clusterGlobal(pgtest.DSN(t), rurl, "\t\t\tno_execute"), t.TempDir())
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", DB: db})
	defer rdb.Close()

	key := uuid.NewString()
	var wg sync.WaitGroup
	var mu sync.Mutex
	created, refused := 0, 0
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i == 50 {
				rdb.FlushDB(context.Background())
			}
			r := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, map[string]string{"Idempotency-Key": key})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case r.Status == http.StatusCreated:
				created++
			case r.Status == 422 && r.errorCode(t) == "idempotency_key_reuse":
				refused++
			default:
				t.Errorf("submit: %d %s", r.Status, r.Body)
			}
		}()
	}
	wg.Wait()
	rdb.FlushDB(context.Background())
	// And once more after the flush, serially.
	if r := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, map[string]string{"Idempotency-Key": key}); r.Status != 422 {
		t.Errorf("after the flush: %d %s", r.Status, r.Body)
	}
	list := do(t, http.MethodGet, g.URL+"/api/v2/jobs?limit=100", nil, nil).JSON(t)
	if n := len(list["jobs"].([]any)); created != 1 || n != 1 {
		t.Fatalf("created %d (refused %d), %d jobs exist; want exactly one", created, refused, n)
	}
}

// TestQueueFull: over the queue bound, 429 queue_full + Retry-After, the key
// is released, and canceling a queued job makes room.
func TestQueueFull(t *testing.T) {
	t.Parallel()
	g := startMember(t, clusterGlobal(pgtest.DSN(t), pgtest.RedisURL(t), "\t\t\tno_execute\n\t\t\tmax_queued 2"), t.TempDir())
	var ids []string
	for i := 0; i < 2; i++ {
		r := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, nil)
		if r.Status != http.StatusCreated {
			t.Fatalf("submit %d: %d %s", i, r.Status, r.Body)
		}
		j := r.JSON(t)
		if j["queue_position"] != float64(i+1) {
			t.Errorf("queue_position %v, want %d", j["queue_position"], i+1)
		}
		ids = append(ids, j["id"].(string))
	}
	key := uuid.NewString()
	full := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, map[string]string{"Idempotency-Key": key})
	if full.Status != 429 || full.errorCode(t) != "queue_full" || full.Header.Get("Retry-After") == "" {
		t.Fatalf("over the bound: %d %s", full.Status, full.Body)
	}
	c := do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+ids[0]+"/cancel", nil, nil)
	if c.Status != 200 || c.JSON(t)["status"] != "canceled" {
		t.Fatalf("cancel queued: %d %s", c.Status, c.Body)
	}
	again := do(t, http.MethodPost, g.URL+"/api/v2/jobs/"+ids[0]+"/cancel", nil, nil)
	if again.Status != 200 || again.JSON(t)["status"] != "canceled" {
		t.Fatalf("cancel again: %d %s", again.Status, again.Body)
	}
	if r := submit(t, g, map[string]any{"workflow": slowWorkflow(1)}, map[string]string{"Idempotency-Key": key}); r.Status != http.StatusCreated {
		t.Fatalf("retry with the released key: %d %s", r.Status, r.Body)
	}
}
