package limits

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/redisconn"
)

// Redis is the multi-instance Limiter. Per workspace it keeps, under one hash
// tag so every key of a workspace lands in one cluster slot:
//
//	<prefix>{ws}:leases         ZSET call id → lease expiry (ms, Redis clock)
//	<prefix>{ws}:cost           HASH call id → reserved cents
//	<prefix>{ws}:rate:<n>:<ms>  ZSET admission → admission time, per window
//
// Every operation runs inside a Lua script (opsScript, which also runs
// several queued operations of one workspace in one call), so reaping,
// checking and reserving are atomic. Scripts read the clock with
// redis.call('TIME'): all gateways share the server's clock, so their own
// skew cannot stretch or shrink a lease. The lease and cost keys carry a
// PEXPIRE of 2×TTL refreshed on every admission and heartbeat, so an idle
// workspace leaves nothing behind. Admission sums the cost HASH (HVALS),
// O(calls in flight) once per script call: bounded by MaxInFlight in
// practice.
type Redis struct {
	client redis.UniversalClient
	pipe   *pipeliner
	owned  bool
	prefix string
	ttl    time.Duration
	// closed stops handovers once Close has begun: a closed limiter
	// answers nothing without Redis.
	closed atomic.Bool
}

var _ Limiter = (*Redis)(nil)

// OpenRedis builds a limiter on a new client for a Redis address (one
// server, a Sentinel set or a Cluster; see storage/redisconn) and owns it
// (Close closes it). It does not dial. Keys start with prefix,
// for example "comfygate:limits:". ttl 0 means DefaultLeaseTTL.
func OpenRedis(url, prefix string, ttl time.Duration) (*Redis, error) {
	cfg, err := redisconn.Parse(url)
	if err != nil {
		// redisconn's errors do not echo the URL, so no password leaks.
		return nil, fmt.Errorf("limits: parse redis url: %w", err)
	}
	// The limiter needs nothing from RESP3, and with it go-redis looks
	// for push notifications before reading every reply.
	cfg.SetDefaultProtocol(2)
	l, err := NewRedis(cfg.NewClient(), prefix, ttl)
	if err != nil {
		return nil, err
	}
	l.owned = true
	return l, nil
}

// NewRedis builds a limiter on a shared client; Close leaves it open.
func NewRedis(client redis.UniversalClient, prefix string, ttl time.Duration) (*Redis, error) {
	ttl, err := normalizeTTL(ttl)
	if err != nil {
		return nil, err
	}
	return &Redis{client: client, pipe: newPipeliner(client, opsScript), prefix: prefix, ttl: ttl}, nil
}

// Close sends any settle still lingering (see startLinger) and closes the
// client if OpenRedis created it.
func (r *Redis) Close() error {
	r.closed.Store(true)
	r.pipe.drain()
	if !r.owned {
		return nil
	}
	if err := r.client.Close(); err != nil {
		return fmt.Errorf("limits: close redis: %w", err)
	}
	return nil
}

// plainName reports whether a name is 1 to 64 of [A-Za-z0-9_.-] (the
// plainNamePattern): what a window must be called, and what may go into a
// key verbatim (any other workspace, where braces would break the hash tag
// and colons could collide with key suffixes, is hashed). A loop, not a
// regexp: it runs on every operation.
func plainName(ws string) bool {
	if len(ws) == 0 || len(ws) > 64 {
		return false
	}
	for i := 0; i < len(ws); i++ {
		c := ws[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// keyTag returns <prefix>{ws}:, which starts every key of workspace.
func (r *Redis) keyTag(workspace string) string {
	tag := workspace
	if !plainName(workspace) {
		sum := sha256.Sum256([]byte(workspace))
		tag = "h-" + hex.EncodeToString(sum[:16])
	}
	return r.prefix + "{" + tag + "}:"
}

// key returns <prefix>{ws}:suffix.
func (r *Redis) key(workspace, suffix string) string { return r.keyTag(workspace) + suffix }

func rateSuffix(w Window) string {
	return "rate:" + w.Name + ":" + strconv.FormatInt(w.Period.Milliseconds(), 10)
}

func unavailable(op string, err error) error {
	return fmt.Errorf("limits: %s: %w: %w", op, ErrUnavailable, err)
}

// Admit implements Limiter with one round trip (shared with the other
// operations pipelined alongside it).
func (r *Redis) Admit(ctx context.Context, workspace string, call Call, lim Limits) (*Lease, error) {
	if err := validate(workspace, call, lim); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if l := r.handOver(workspace, call, lim); l != nil {
		return l, nil
	}
	sent := monoNow()
	reply, err := r.pipe.do(ctx, r.admitOp(workspace, call, lim))
	if err != nil {
		return nil, unavailable("admit", err)
	}
	l, err := r.admitted(workspace, call, lim, reply)
	if l != nil {
		l.renewed.Store(sent)
	}
	return l, err
}

func (r *Redis) admitOp(workspace string, call Call, lim Limits) *op {
	o := &op{keyTag: r.keyTag(workspace)}
	o.args = make([]any, 0, 7+4*len(lim.Rate))
	o.args = append(o.args, "A", call.ID, r.ttl.Milliseconds(), lim.MaxInFlight, call.Cents, lim.SpendCeilingCents,
		len(lim.Rate))
	for i, w := range lim.Rate {
		o.keys = append(o.keys, o.keyTag+rateSuffix(w))
		o.args = append(o.args, keyRef(i), w.Name, w.Period.Milliseconds(), w.Max)
	}
	return o
}

// admitted turns the admit operation's reply into a Lease or a refusal.
func (r *Redis) admitted(workspace string, call Call, lim Limits, reply any) (*Lease, error) {
	res, ok := reply.([]any)
	if !ok || len(res) != 8 {
		return nil, unavailable("admit", unexpected(reply))
	}
	code, _ := res[0].(int64)
	reason, _ := res[1].(string)
	limit, _ := res[2].(int64)
	current, _ := res[3].(int64)
	retryMS, _ := res[4].(int64)
	window, _ := res[5].(string)
	count, _ := res[6].(int64)
	committed, _ := res[7].(int64)
	switch code {
	case -1:
		return nil, fmt.Errorf("%w: %s", ErrDuplicateCall, call.ID)
	case 0:
		return nil, newRefusal(Reason(reason), limit, current, window, time.Duration(retryMS)*time.Millisecond)
	}
	return &Lease{
		ID: call.ID, Workspace: workspace, Cents: call.Cents,
		InFlight: int(count), CommittedCents: committed, TTL: r.ttl,
		store: r, admitted: boundsOf(lim), resumable: call.Resumable,
	}, nil
}

func unexpected(reply any) error { return fmt.Errorf("unexpected reply %v", reply) }

// newRefusal fills Remaining from Limit and Current as the contract defines it.
func newRefusal(reason Reason, limit, current int64, window string, retry time.Duration) *Refusal {
	ref := &Refusal{Reason: reason, Limit: limit, Current: current, Window: window, RetryAfter: retry}
	if reason == ReasonSpend {
		ref.Remaining = max(0, limit-current)
	}
	return ref
}

func (r *Redis) heartbeat(ctx context.Context, l *Lease) error {
	reply, err := r.pipe.do(ctx, &op{keyTag: r.keyTag(l.Workspace), args: []any{"H", l.slotName(), r.ttl.Milliseconds()}})
	if err != nil {
		return unavailable("heartbeat", err)
	}
	if ok, _ := reply.(int64); ok != 1 {
		return fmt.Errorf("%w: call %s expired", ErrLeaseLost, l.ID)
	}
	return nil
}

// settleOp is the settle operation of l. It names the cents the lease
// reserved (what admission stored; -1 for a resumed lease, whose cents the
// script reads).
func (r *Redis) settleOp(l *Lease) *op {
	cents := l.Cents
	if l.resumed {
		cents = -1
	}
	return &op{keyTag: r.keyTag(l.Workspace), args: []any{"S", l.slotName(), cents}}
}

func (r *Redis) settle(ctx context.Context, l *Lease) error {
	if _, err := r.pipe.do(ctx, r.settleOp(l)); err != nil {
		return unavailable("settle", err)
	}
	return nil
}

// settleOrdered queues the settle at once and reports its result to done
// from another goroutine.
func (r *Redis) settleOrdered(l *Lease, done func(error)) {
	o := r.settleOp(l)
	// Only a slot that holds its reservation (a resumed lease does not
	// know it) and that no other process settles by its id may be handed
	// over.
	if !l.resumable && !l.resumed {
		o.freed = l
	}
	o.onDone = func(_ any, err error) {
		if err != nil {
			err = unavailable("settle", err)
		}
		done(err)
	}
	r.pipe.start(o)
}

// Inspect implements Limiter.
func (r *Redis) Inspect(ctx context.Context, workspace string) (int, int64, error) {
	if err := validateWorkspace(workspace); err != nil {
		return 0, 0, err
	}
	reply, err := r.pipe.do(ctx, &op{keyTag: r.keyTag(workspace), args: []any{"I"}})
	if err != nil {
		return 0, 0, unavailable("inspect", err)
	}
	res, ok := reply.([]any)
	if !ok || len(res) != 2 {
		return 0, 0, unavailable("inspect", unexpected(reply))
	}
	n, _ := res[0].(int64)
	cents, _ := res[1].(int64)
	return int(n), cents, nil
}
