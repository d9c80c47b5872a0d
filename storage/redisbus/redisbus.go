// Package redisbus carries job events between gateway processes over one
// Redis pub/sub channel, delivering them into each process's bus.Hub. One
// subscriber connection serves the whole process, however many streams are open.
//
// On a Redis Cluster it uses classic PUBLISH/SUBSCRIBE, not sharded pub/sub
// (SPUBLISH/SSUBSCRIBE): the Cluster forwards a classic publish to every
// node, so a publish (keyless) may go to any live primary and go-redis
// retries it on another after a failure, while a sharded one must reach the
// channel's one shard, which with a single channel would put every event on
// one primary and stop every publish while that primary fails over. One
// channel gains nothing from sharding; the cost, each event crossing the
// cluster bus to every node, is small. It also keeps one code path for one
// server, Sentinel and a Cluster. See docs/redis-ha.md.
package redisbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/internal/redispipe"
)

// Bus is a bus.Bus over Redis pub/sub.
type Bus struct {
	*bus.Hub
	// pipe sends publishes, together with the process's other commands to
	// the same Redis (idempotency claims) that are waiting, as one
	// pipeline, in order: one round trip and system call for many.
	pipe    *redispipe.Pipe
	channel string

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New returns a bus on the Redis at url using channel <prefix>events. It does
// not dial until Start.
func New(url, prefix string) (*Bus, error) {
	pipe, err := redispipe.Open(url)
	if err != nil {
		return nil, fmt.Errorf("redisbus: %w", err)
	}
	return &Bus{Hub: bus.NewHub(), pipe: pipe, channel: prefix + "events"}, nil
}

// Start subscribes and delivers until Close. It returns once the
// subscription is confirmed, so events published afterwards are seen.
func (b *Bus) Start(ctx context.Context) error {
	sub := b.pipe.Client().Subscribe(ctx, b.channel)
	if _, err := sub.Receive(ctx); err != nil {
		sub.Close()
		return fmt.Errorf("redisbus: subscribing: %w", err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	b.done = make(chan struct{})
	go b.deliver(runCtx, sub)
	return nil
}

func (b *Bus) deliver(ctx context.Context, sub *redis.PubSub) {
	defer close(b.done)
	defer sub.Close()
	// The channel reconnects by itself after a dropped connection; events
	// published meanwhile are lost, which streams absorb by re-reading storage.
	ch := sub.Channel(redis.WithChannelHealthCheckInterval(10 * time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			var e bus.Event
			if json.Unmarshal([]byte(m.Payload), &e) == nil {
				b.Hub.Deliver(e)
			}
		}
	}
}

// Publish sends e to every process (this one included, through Redis).
func (b *Bus) Publish(ctx context.Context, e bus.Event) error {
	payload, err := json.Marshal(e)
	if err != nil {
		return err
	}
	cmd := redis.NewIntCmd(ctx, "publish", b.channel, payload)
	if err := b.pipe.Do(ctx, cmd); err != nil {
		// cmd may still be in a running pipeline: leave it alone.
		return fmt.Errorf("redisbus: publishing: %w", err)
	}
	if err := cmd.Err(); err != nil {
		return fmt.Errorf("redisbus: publishing: %w", err)
	}
	return nil
}

// Close stops delivery and closes the connection.
func (b *Bus) Close() error {
	var err error
	b.once.Do(func() {
		if b.cancel != nil {
			b.cancel()
			<-b.done
		}
		err = b.pipe.Close()
	})
	return err
}

var _ bus.Bus = (*Bus)(nil)
