// Package redisbus carries job events between gateway processes over one
// Redis pub/sub channel, delivering them into each process's bus.Hub. One
// subscriber connection serves the whole process, however many streams are open.
package redisbus

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/bus"
	"github.com/comfygate/comfygate/storage/internal/combine"
)

// Bus is a bus.Bus over Redis pub/sub.
type Bus struct {
	*bus.Hub
	client  *redis.Client
	channel string
	// publishes sends concurrent publishes as one pipeline: one round trip
	// and system call for many.
	publishes *combine.Combiner[*publishReq]

	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// New returns a bus on the Redis at url using channel <prefix>events. It does
// not dial until Start.
func New(url, prefix string) (*Bus, error) {
	opt, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisbus: %w", err)
	}
	b := &Bus{Hub: bus.NewHub(), client: redis.NewClient(opt), channel: prefix + "events"}
	b.publishes = &combine.Combiner[*publishReq]{Timeout: 10 * time.Second, Run: b.publishBatch}
	return b, nil
}

// publishReq is one Publish in a pipeline.
type publishReq struct {
	payload []byte
	err     error
}

// Start subscribes and delivers until Close. It returns once the
// subscription is confirmed, so events published afterwards are seen.
func (b *Bus) Start(ctx context.Context) error {
	sub := b.client.Subscribe(ctx, b.channel)
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
	r := &publishReq{payload: payload}
	alone, err := b.publishes.Do(ctx, r)
	if err != nil {
		// r may still be in a running batch: leave it alone.
		return fmt.Errorf("redisbus: publishing: %w", err)
	}
	if alone {
		defer b.publishes.Leave()
		r.err = b.client.Publish(ctx, b.channel, payload).Err()
	}
	if r.err != nil {
		return fmt.Errorf("redisbus: publishing: %w", r.err)
	}
	return nil
}

// publishBatch sends the publishes of a batch, in order, as one pipeline.
func (b *Bus) publishBatch(ctx context.Context, reqs []*publishReq) {
	pipe := b.client.Pipeline()
	cmds := make([]*redis.IntCmd, len(reqs))
	for i, r := range reqs {
		cmds[i] = pipe.Publish(ctx, b.channel, r.payload)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	for i, r := range reqs {
		r.err = cmds[i].Err()
	}
}

// Close stops delivery and closes the connection.
func (b *Bus) Close() error {
	var err error
	b.once.Do(func() {
		if b.cancel != nil {
			b.cancel()
			<-b.done
		}
		err = b.client.Close()
	})
	return err
}

var _ bus.Bus = (*Bus)(nil)
