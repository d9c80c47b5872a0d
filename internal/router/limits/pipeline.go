package limits

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every operation of the Redis limiter goes through one pipeliner.
// Operations that arrive while a pipeline is on the wire wait and then go
// out together in the next one, as one script call per workspace
// (opsScript): under load Redis and the gateway pay one write, one read and
// one script call for many operations instead of one each, which is where
// the limiter's CPU went. An idle pipeliner sends an operation at once from
// the caller's own goroutine, so a lone call waits for nothing and changes
// hands never.
//
// Pipelines go out one at a time and in arrival order, a workspace's
// operations keep their order inside its script call, and Redis runs one
// connection's commands in order: an operation queued before another on the
// same workspace is executed before it. Callers rely on that (see
// Lease.SettleOrdered).
//
// Whoever sends a pipeline (the leader) delivers its replies and then hands
// the operations that queued meanwhile to the first of them, which sends
// them as the next pipeline: every waiting caller is woken exactly once,
// either with its reply or to lead, and no caller leads more than one
// pipeline.
//
// An operation nobody waits for (start: the settle after a call) is not
// sent on its own while the pipeliner is idle: it lingers up to
// startLinger for the next operation anyone waits for, usually the next
// admission, and goes out ahead of it in the same pipeline, or alone when
// the linger ends. A caller issuing call after call then pays one round
// trip per call instead of two, and its admission never queues behind its
// previous call's settle still on the wire. The linger only delays a
// release: for that long the workspace looks busier than it is, never
// less busy, so no bound can be overshot. A settle that has not been sent
// may also never be: the workspace's next admission can take its slot over
// instead (takeFreed, Redis.handOver).

// pipelineTimeout bounds one pipeline exchange. It is independent of the
// callers' contexts: a pipeline carries other callers' operations, so one
// caller's disconnect must not fail them.
const pipelineTimeout = 10 * time.Second

// maxOpsPerScript bounds one script call, and so how long it holds Redis.
const maxOpsPerScript = 128

// startLinger is how long an operation nobody waits for may wait for
// company while the pipeliner is idle: well above the gap between one
// call's answer and a busy client's next call, far below the lease TTL and
// any partner call's duration.
const startLinger = 2 * time.Millisecond

// luaScript is a Lua script and its SHA-1 for EVALSHA. (redis.Script's
// Load and Run cannot be used in a pipeline: Load takes the not yet
// executed command's empty reply for the new digest, Run's EVAL fallback
// needs the EVALSHA's reply first.)
type luaScript struct {
	src, sha string
}

func newLuaScript(src string) *luaScript {
	sum := sha1.Sum([]byte(src))
	return &luaScript{src: src, sha: hex.EncodeToString(sum[:])}
}

// keyRef in op.args stands for op.keys[keyRef]; it becomes the key's index
// in the script call's KEYS when the call is built.
type keyRef int

// op is one limiter operation on one workspace and, once done, its reply.
type op struct {
	keyTag string   // the workspace's key prefix: <prefix>{tag}:
	args   []any    // the operation's ARGV, kind first (see opsScript)
	keys   []string // extra keys the args refer to by keyRef

	reply any
	err   error
	// onDone, when set, is called with the result by the goroutine that
	// delivers it, instead of anyone waiting on done. It must be quick.
	onDone func(reply any, err error)
	// batch is set when this op is woken to lead: the ops to send.
	batch []*op
	done  chan struct{}
	// freed is the lease a started settle frees when it may be handed over:
	// until the settle is sent, its slot may be handed over instead (see
	// Redis.handOver).
	freed *Lease
}

type pipeliner struct {
	client redis.UniversalClient
	script *luaScript
	linger time.Duration // startLinger; tests change it

	mu    sync.Mutex
	busy  bool // a pipeline is on the wire (or being handed over)
	queue []*op
	// lingering holds started ops while nothing is on the wire, in order;
	// flushTimer sends them when the linger ends. Never both lingering
	// and busy: whoever sets busy takes the lingering ops along.
	lingering  []*op
	flushTimer *time.Timer
	idle       *sync.Cond // broadcast when busy ends; drain waits on it
}

func newPipeliner(client redis.UniversalClient, script *luaScript) *pipeliner {
	p := &pipeliner{client: client, script: script, linger: startLinger}
	p.idle = sync.NewCond(&p.mu)
	return p
}

// do runs o and returns its reply. The context bounds nothing once o is
// queued (see pipelineTimeout); it is checked before.
func (p *pipeliner) do(ctx context.Context, o *op) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	o.done = make(chan struct{})
	if batch := p.enqueue(o); batch != nil {
		p.lead(batch)
		return o.reply, o.err
	}
	<-o.done
	if o.batch != nil {
		p.lead(o.batch)
	}
	return o.reply, o.err
}

// start queues o now, so that its place in the order is fixed when start
// returns, and calls o.onDone with the result later, from another
// goroutine. It never waits for Redis. While nothing is on the wire, o
// lingers for company (see startLinger).
func (p *pipeliner) start(o *op) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy {
		p.queue = append(p.queue, o)
		return
	}
	p.lingering = append(p.lingering, o)
	if p.flushTimer == nil {
		p.flushTimer = time.AfterFunc(p.linger, p.flush)
	} else if len(p.lingering) == 1 {
		p.flushTimer.Reset(p.linger)
	}
}

// flush sends the lingering ops once their linger has ended, unless
// someone took them along meanwhile.
func (p *pipeliner) flush() {
	p.mu.Lock()
	if p.busy || len(p.lingering) == 0 {
		p.mu.Unlock()
		return
	}
	batch := p.takeLingering(nil)
	p.mu.Unlock()
	p.lead(batch)
}

// drain sends any lingering ops now and returns once nothing is on the
// wire or queued; for Close, so that no started op is lost with the client.
func (p *pipeliner) drain() {
	p.mu.Lock()
	for {
		if p.busy {
			p.idle.Wait()
			continue
		}
		if len(p.lingering) == 0 {
			p.mu.Unlock()
			return
		}
		batch := p.takeLingering(nil)
		p.mu.Unlock()
		p.lead(batch)
		p.mu.Lock()
	}
}

// takeFreed removes keyTag's last op not yet sent (lingering, or queued
// behind a pipeline on the wire) when it is a started settle whose lease
// accept takes, and returns it; otherwise nil. Only the last one: an
// operation queued after the settle was promised to run after it (see
// Lease.SettleOrdered), so the slot must not go to a later arrival first.
// The settle is then never sent; the caller delivers its result. accept
// runs under p.mu and must not lock.
func (p *pipeliner) takeFreed(keyTag string, accept func(*Lease) bool) *op {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := &p.lingering
	if p.busy {
		list = &p.queue
	}
	for i := len(*list) - 1; i >= 0; i-- {
		o := (*list)[i]
		if o.keyTag != keyTag {
			continue
		}
		if o.freed == nil || !accept(o.freed) {
			return nil
		}
		*list = append((*list)[:i], (*list)[i+1:]...)
		if !p.busy && len(p.lingering) == 0 {
			p.flushTimer.Stop()
			p.lingering = nil
		}
		return o
	}
	return nil
}

// enqueue returns the batch o's caller must send now, o last behind any
// lingering ops, when nothing is on the wire; otherwise o waits in the
// queue and enqueue returns nil.
func (p *pipeliner) enqueue(o *op) []*op {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.busy {
		p.queue = append(p.queue, o)
		return nil
	}
	return p.takeLingering(o)
}

// takeLingering marks the pipeliner busy and returns the lingering ops
// followed by o (when not nil). p.mu is held.
func (p *pipeliner) takeLingering(o *op) []*op {
	p.busy = true
	batch := p.lingering
	if len(batch) > 0 {
		p.flushTimer.Stop() // lingering ops imply a timer
	}
	// The batch takes the array along: a later start must not append
	// into it while the batch's replies are being delivered.
	p.lingering = nil
	if o != nil {
		batch = append(batch, o)
	}
	return batch
}

// lead sends batch, hands the queue on and delivers the replies.
func (p *pipeliner) lead(batch []*op) {
	p.send(batch)
	p.mu.Lock()
	next := p.queue
	p.queue = nil
	if len(next) == 0 {
		p.busy = false
		p.idle.Broadcast()
	}
	p.mu.Unlock()
	if len(next) > 0 {
		p.wakeToLead(next)
	}
	for i, o := range batch {
		if i == 0 && o.batch != nil {
			continue // woken to lead: its done is already closed
		}
		p.deliver(o)
	}
}

// wakeToLead hands next to its first op's caller; an op whose caller does
// not wait (started with onDone) has nobody to wake, so a goroutine leads.
func (p *pipeliner) wakeToLead(next []*op) {
	if next[0].onDone != nil {
		go p.lead(next)
		return
	}
	next[0].batch = next
	close(next[0].done)
}

func (p *pipeliner) deliver(o *op) {
	if o.onDone != nil {
		o.onDone(o.reply, o.err)
		return
	}
	close(o.done)
}

// call is one script call: a run of one workspace's ops.
type call struct {
	keyTag string
	keys   []string
	args   []any
	ops    []*op
	cmd    *redis.Cmd
}

// send runs batch as one pipeline: one script call per workspace (longer
// runs split), in the order of each workspace's first op. Workspaces share
// no keys, so only the order within a workspace matters, and it is kept.
func (p *pipeliner) send(batch []*op) {
	ctx, cancel := context.WithTimeout(context.Background(), pipelineTimeout)
	defer cancel()
	calls := group(batch)
	p.exec(ctx, calls, false)
	var retry []*call
	for _, c := range calls {
		if err := c.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			retry = append(retry, c)
		}
	}
	if len(retry) > 0 {
		// Redis restarted or its script cache was flushed: send the retried
		// calls as EVAL, which caches the script on the server that runs
		// each of them (with a cluster, the node owning its keys). Only a
		// workspace with more than maxOpsPerScript queued operations, whose
		// calls straddle another client reloading the script, could see
		// its second call run before its first.
		p.exec(ctx, retry, true)
	}
	for _, c := range calls {
		scatter(c)
	}
}

func (p *pipeliner) exec(ctx context.Context, calls []*call, eval bool) {
	pipe := p.client.Pipeline()
	for _, c := range calls {
		if eval {
			c.cmd = pipe.Eval(ctx, p.script.src, c.keys, c.args...)
		} else {
			c.cmd = pipe.EvalSha(ctx, p.script.sha, c.keys, c.args...)
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
}

// group builds the script calls for batch.
func group(batch []*op) []*call {
	var calls []*call
	var last map[string]*call // built once there are many workspaces
	for _, o := range batch {
		var c *call // the last call of o's workspace
		if last != nil {
			c = last[o.keyTag]
		} else {
			for i := len(calls) - 1; i >= 0; i-- {
				if calls[i].keyTag == o.keyTag {
					c = calls[i]
					break
				}
			}
		}
		if c == nil || len(c.ops) == maxOpsPerScript {
			c = &call{keyTag: o.keyTag, keys: []string{o.keyTag + "leases", o.keyTag + "cost"}}
			calls = append(calls, c)
			if last == nil && len(calls) > 16 {
				last = make(map[string]*call, 2*len(calls))
				for _, have := range calls {
					last[have.keyTag] = have
				}
			}
			if last != nil {
				last[c.keyTag] = c
			}
		}
		c.ops = append(c.ops, o)
		for _, a := range o.args {
			if r, ok := a.(keyRef); ok {
				a = c.keyIndex(o.keys[r])
			}
			c.args = append(c.args, a)
		}
	}
	return calls
}

// keyIndex returns k's 1-based index in c.keys, adding it if new.
func (c *call) keyIndex(k string) int {
	for i, have := range c.keys {
		if have == k {
			return i + 1
		}
	}
	c.keys = append(c.keys, k)
	return len(c.keys)
}

// scatter hands each op its element of the call's reply.
func scatter(c *call) {
	res, err := c.cmd.Slice()
	if err == nil && len(res) != len(c.ops) {
		err = unexpected(res)
	}
	for i, o := range c.ops {
		if err != nil {
			o.err = err
			continue
		}
		o.reply = res[i]
	}
}
