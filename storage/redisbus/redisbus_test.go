package redisbus

import (
	"context"
	"testing"
	"time"

	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/pgtest"
)

// TestEventsCrossProcesses: two buses on one Redis stand for two gateway
// processes; an event published on one reaches a subscriber of the other.
func TestEventsCrossProcesses(t *testing.T) {
	url, prefix := pgtest.RedisURL(t), pgtest.KeyPrefix(t)
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
