package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/redisconn"
	"github.com/comfygate/comfygate/storage/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Both shared topologies answer through redisconn's clients, and keys in
// different slots land on different Cluster primaries.
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

// Killing a Cluster primary hands its slots to its replica.
func TestClusterFailover(t *testing.T) {
	cl := redistest.NewCluster(t, 1)
	p, err := cl.PrimaryFor("k")
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	start := time.Now()
	if err := cl.WaitHealthy(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	q, err := cl.PrimaryFor("k")
	if err != nil || q == p {
		t.Fatalf("primary after the kill: %v, %v", q, err)
	}
	t.Logf("replica took over in %v", time.Since(start))
}

// Killing the Sentinel primary promotes the replica.
func TestSentinelFailover(t *testing.T) {
	s := redistest.NewSentinel(t)
	s.Primary.Kill()
	start := time.Now()
	for {
		addr, err := s.MasterAddr()
		if err == nil && addr == s.Replica.Addr {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("no failover: %v %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("sentinels switched in %v", time.Since(start))
}
