package redisbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/pgtest"
	"github.com/comfygate/comfygate/storage/redisconn"
	"github.com/comfygate/comfygate/storage/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// TestEventsCrossProcesses: two buses on one Redis stand for two gateway
// processes; an event published on one reaches a subscriber of the other.
// It runs on one server, a Cluster (where PUBLISH reaches subscribers on
// every node) and a Sentinel set.
func TestEventsCrossProcesses(t *testing.T) {
	for _, tp := range redistest.Topologies(pgtest.RedisURL) {
		t.Run(tp.Name, func(t *testing.T) { testEventsCrossProcesses(t, tp.URL(t)) })
	}
}

func testEventsCrossProcesses(t *testing.T, url string) {
	prefix := pgtest.KeyPrefix(t)
	ctx := context.Background()
	one, err := New(url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	two, err := New(url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []*Bus{one, two} {
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
	}
	sub := two.Subscribe("job-1")
	defer sub.Cancel()
	queued := two.SubscribeQueued()
	defer queued.Cancel()

	if err := one.Publish(ctx, bus.Event{JobID: "job-1", Kind: "status", Data: []byte(`{"status":"running"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := one.Publish(ctx, bus.Event{JobID: "job-2", Kind: "queued", Pool: "builtin"}); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-sub.C:
		if e.JobID != "job-1" || e.Kind != "status" || string(e.Data) != `{"status":"running"}` {
			t.Errorf("got %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event did not cross")
	}
	select {
	case e := <-queued.C:
		if e.Pool != "builtin" {
			t.Errorf("got %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("queued event did not cross")
	}
}

func TestUnreachableRedisFailsStart(t *testing.T) {
	b, err := New("redis://127.0.0.1:1/0", "x:")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.Start(ctx); err == nil {
		t.Fatal("Start succeeded against a closed port")
	}
}

// Concurrent publishes (sent together as pipelines) each reach Redis once.
func TestConcurrentPublishes(t *testing.T) {
	for _, tp := range redistest.Topologies(pgtest.RedisURL) {
		t.Run(tp.Name, func(t *testing.T) { testConcurrentPublishes(t, tp.URL(t)) })
	}
}

func testConcurrentPublishes(t *testing.T, url string) {
	const n = 200
	prefix := pgtest.KeyPrefix(t)
	ctx := context.Background()
	b, err := New(url, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	// A raw subscriber with room for every event: the hub's small
	// per-subscription buffers would drop some.
	raw, err := redisconn.Open(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { raw.Close() })
	sub := raw.Subscribe(ctx, b.channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	ch := sub.Channel(redis.WithChannelSize(2 * n))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := b.Publish(ctx, bus.Event{JobID: fmt.Sprint("job-", i), Kind: "queued", Pool: "p"}); err != nil {
				t.Errorf("Publish %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	got := map[string]int{}
	timeout := time.After(20 * time.Second)
	for len(got) < n {
		select {
		case m := <-ch:
			var e bus.Event
			if err := json.Unmarshal([]byte(m.Payload), &e); err != nil {
				t.Fatalf("payload %q: %v", m.Payload, err)
			}
			got[e.JobID]++
		case <-timeout:
			t.Fatalf("%d of %d events arrived", len(got), n)
		}
	}
	for i := range n {
		if c := got[fmt.Sprint("job-", i)]; c != 1 {
			t.Errorf("event %d arrived %d times, want once", i, c)
		}
	}
}
