package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/redisconn"
	"github.com/comfygate/comfygate/storage/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Both shared topologies answer through redisconn's clients. (Killing
// nodes is tested where it matters: storage/redisconn's
// TestClusterClientFollowsFailover and tests/chaos.)
func TestTopologies(t *testing.T) {
	for _, tp := range []redistest.Topology{{Name: "cluster", URL: redistest.ClusterURL}, {Name: "sentinel", URL: redistest.SentinelURL}} {
		t.Run(tp.Name, func(t *testing.T) {
			start := time.Now()
			url := tp.URL(t)
			t.Logf("%s up in %v", tp.Name, time.Since(start))
			c, err := redisconn.Open(url)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for _, k := range []string{"a", "b", "c", "{x}1", "{x}2"} {
				if err := c.Set(ctx, "redistest:"+k, k, time.Minute).Err(); err != nil {
					t.Fatalf("set %s: %v", k, err)
				}
				if v, err := c.Get(ctx, "redistest:"+k).Result(); err != nil || v != k {
					t.Fatalf("get %s = %q, %v", k, v, err)
				}
			}
		})
	}
}
