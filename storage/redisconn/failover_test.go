package redisconn_test

import (
	"context"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/redisconn"
	"github.com/comfygate/comfygate/storage/redistest"
)

// After a Cluster primary is killed, a client reaches the replica that
// took its slots over by itself, through pipelines as the gateway sends
// them. (go-redis alone re-reads the slot map only on MOVED/ASK or once a
// minute, and kept dialing the dead node; the bound here is well inside
// that minute and well outside the failover's couple of seconds.)
func TestClusterClientFollowsFailover(t *testing.T) {
	cl := redistest.NewCluster(t, 1)
	c, err := redisconn.Open(cl.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const key = "redisconn:failover"
	ctx := context.Background()
	if err := c.Set(ctx, key, 1, 0).Err(); err != nil {
		t.Fatal(err)
	}
	p, err := cl.PrimaryFor(key)
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	start := time.Now()
	var last error
	for time.Since(start) < 20*time.Second {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		pipe := c.Pipeline()
		cmd := pipe.Incr(cctx, key)
		_, _ = pipe.Exec(cctx)
		cancel()
		if last = cmd.Err(); last == nil {
			t.Logf("served again %v after the kill", time.Since(start).Round(10*time.Millisecond))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("still failing 20s after the kill: %v", last)
}
