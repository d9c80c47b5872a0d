package redispipe

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// Commands of different kinds, sent concurrently (so mostly in shared
// pipelines), each get their own reply.
// On a Cluster the keys spread over the three primaries, so each pipeline
// is split by node.
func TestConcurrentMixedCommands(t *testing.T) {
	for _, tp := range redistest.Topologies(pgtest.RedisURL) {
		t.Run(tp.Name, func(t *testing.T) { testConcurrentMixedCommands(t, tp.URL(t)) })
	}
}

func testConcurrentMixedCommands(t *testing.T, url string) {
	prefix := pgtest.KeyPrefix(t)
	ctx := context.Background()
	p, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	const n = 300
	var mu sync.Mutex
	won := map[string]int{}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("%sk%d", prefix, i%(n/2)) // each key twice
			set := redis.NewBoolCmd(ctx, "set", key, "1", "px", 60000, "nx")
			if err := p.Do(ctx, set); err != nil {
				t.Errorf("Do: %v", err)
				return
			}
			if ok, err := set.Result(); err != nil {
				t.Errorf("set %s: %v", key, err)
			} else if ok {
				mu.Lock()
				won[key]++
				mu.Unlock()
			}
			echo := redis.NewStringCmd(ctx, "echo", key)
			if err := p.Do(ctx, echo); err != nil || echo.Val() != key {
				t.Errorf("echo %s = %q, %v, %v", key, echo.Val(), err, echo.Err())
			}
		}()
	}
	wg.Wait()
	// Exactly one of the two SET NX of each key won.
	for i := range n / 2 {
		key := fmt.Sprintf("%sk%d", prefix, i)
		if won[key] != 1 {
			t.Errorf("%s: %d SET NX won, want 1", key, won[key])
		}
	}
}

// A second Open of the same URL shares the pipe; the client closes with
// the last Close.
func TestOpenSharesUntilLastClose(t *testing.T) {
	url := pgtest.RedisURL(t)
	a, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	if a.shared != b.shared {
		t.Fatal("two pipes for one URL")
	}
	ctx := context.Background()
	a.Close()
	a.Close() // a repeated Close releases nothing more
	if err := b.Client().Ping(ctx).Err(); err != nil {
		t.Fatalf("client closed while still held: %v", err)
	}
	b.Close()
	if err := b.Client().Ping(ctx).Err(); err == nil {
		t.Fatal("client still open after the last Close")
	}
	c, err := Open(url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.shared == a.shared {
		t.Fatal("a closed pipe was handed out again")
	}
	if err := c.Client().Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
}
