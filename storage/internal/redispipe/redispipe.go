// Package redispipe sends the Redis commands of a process's stores that
// use one Redis (idempotency claims, bus publishes) through one pipeline.
// Each submit makes two round trips to Redis, a claim before its insert
// and a publish after it; sent separately, each mostly went out alone. In
// one queue, the claims of new submits and the publishes of finished ones
// share a round trip, and so a system call and a reply read, under load.
//
// Commands keep their own replies and errors, and go out in the order they
// were handed in (a pipeline is written and executed in order), so
// publishes stay ordered.
package redispipe

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/internal/combine"
	"github.com/comfygate/comfygate/storage/redisconn"
)

// batchTimeout bounds one pipeline: it serves many callers, so it runs on
// no single caller's context.
const batchTimeout = 10 * time.Second

// Pipe is one holder's use of the process's shared Redis client and its
// command queue. Its Close releases that use once, however often it is
// called, so no holder can drop another's.
type Pipe struct {
	*shared
	closeOnce sync.Once
	closeErr  error
}

// shared is the client and queue every Pipe to one URL uses.
type shared struct {
	url    string
	client redis.UniversalClient
	cmds   *combine.Combiner[redis.Cmder]
	refs   int // guarded by registry.mu
}

var registry struct {
	mu    sync.Mutex
	pipes map[string]*shared
}

// Open returns a use of the process's pipe to the Redis at url (any form
// redisconn reads: one server, a Sentinel set or a Cluster), creating the
// pipe on first use. Every Open must be matched by a Close. It does not
// dial. On a Cluster a pipeline is split by node, each command going to
// the node owning its key (keyless ones, PUBLISH, to any primary).
func Open(url string) (*Pipe, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if p, ok := registry.pipes[url]; ok {
		p.refs++
		return &Pipe{shared: p}, nil
	}
	client, err := redisconn.Open(url)
	if err != nil {
		return nil, err // redisconn's errors do not echo the URL
	}
	p := &shared{url: url, client: client, refs: 1}
	p.cmds = &combine.Combiner[redis.Cmder]{Timeout: batchTimeout, Run: p.run}
	if registry.pipes == nil {
		registry.pipes = map[string]*shared{}
	}
	registry.pipes[url] = p
	return &Pipe{shared: p}, nil
}

// Client is the shared client, for commands that need no batching.
func (p *shared) Client() redis.UniversalClient { return p.client }

// Do sends cmd (built with redis.New…Cmd and ctx) and returns once its
// reply, or error, is in cmd. A command that finds nothing in flight goes
// out at once; others go out together in the next pipeline. The error is
// set when ctx ended first; cmd may then still be in a running pipeline
// and must be left alone.
func (p *shared) Do(ctx context.Context, cmd redis.Cmder) error {
	alone, err := p.cmds.Do(ctx, cmd)
	if err != nil {
		return err
	}
	if alone {
		defer p.cmds.Leave()
		_ = p.client.Process(ctx, cmd) // the error is also in cmd
	}
	return nil
}

// run sends a batch as one pipeline.
func (p *shared) run(ctx context.Context, cmds []redis.Cmder) {
	pipe := p.client.Pipeline()
	for _, c := range cmds {
		_ = pipe.Process(ctx, c) // queues it
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
}

// Close releases this holder's use (once; later calls return the first
// result); the last use closes the client.
func (p *Pipe) Close() error {
	p.closeOnce.Do(func() { p.closeErr = p.release() })
	return p.closeErr
}

func (p *shared) release() error {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	p.refs--
	if p.refs > 0 {
		return nil
	}
	delete(registry.pipes, p.url)
	return p.client.Close()
}
