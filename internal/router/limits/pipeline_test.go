package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
)

// testRedis is a Redis limiter whose script is a copy no server has cached
// yet, so its first calls meet NOSCRIPT without flushing the shared
// server's script cache.
func testRedis(t *testing.T, ttl time.Duration) *Redis {
	t.Helper()
	opts, err := redis.ParseURL(pgtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	r, err := NewRedis(c, pgtest.KeyPrefix(t), ttl)
	if err != nil {
		t.Fatal(err)
	}
	r.pipe = newPipeliner(c, newLuaScript(fmt.Sprintf("%s\n-- %d", opsScriptSrc, time.Now().UnixNano())))
	return r
}

// TestPipelinerRepliesMatchCalls: many concurrent callers on several
// workspaces, the first of them meeting NOSCRIPT; each gets its own reply.
func TestPipelinerRepliesMatchCalls(t *testing.T) {
	r := testRedis(t, 0)
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := range 48 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := fmt.Sprint("ws", g%3)
			for i := range 40 {
				id := fmt.Sprintf("%d-%d", g, i)
				l, err := r.Admit(ctx, ws, Call{ID: id, Cents: int64(g)}, Limits{})
				if err != nil {
					t.Errorf("admit %s: %v", id, err)
					return
				}
				if l.ID != id || l.InFlight < 1 || l.CommittedCents < int64(g) {
					t.Errorf("lease %+v for call %s (%d cents)", l, id, g)
				}
				if err := l.Settle(ctx); err != nil {
					t.Errorf("settle %s: %v", id, err)
				}
			}
		}()
	}
	wg.Wait()
	for ws := range 3 {
		if n, cents, err := r.Inspect(ctx, fmt.Sprint("ws", ws)); err != nil || n != 0 || cents != 0 {
			t.Errorf("ws%d: %d in flight, %d cents (%v), want 0, 0", ws, n, cents, err)
		}
	}
}

// TestScriptCallRunsOpsInOrder sends one batch whose operations depend on
// each other in one workspace, interleaved with another workspace's: every
// reply is what the operations would have answered one by one.
func TestScriptCallRunsOpsInOrder(t *testing.T) {
	r := testRedis(t, 0)
	lim := Limits{MaxInFlight: 2, SpendCeilingCents: 10}
	one := func(id string, cents int64) *op { return r.admitOp("one", Call{ID: id, Cents: cents}, lim) }
	a, b := &Lease{ID: "a", Workspace: "one", Cents: 4}, &Lease{ID: "b", Workspace: "one", resumed: true}
	batch := []*op{
		one("a", 4), // admitted: 1 call, 4 cents
		r.admitOp("two", Call{ID: "x", Cents: 9}, lim), // other workspace
		one("a", 1),   // duplicate
		one("b", 5),   // admitted: 2 calls, 9 cents
		one("c", 1),   // refused: 2 in flight
		r.settleOp(a), // 1 call, 5 cents
		one("d", 6),   // refused: 5 + 6 > 10
		one("e", 5),   // admitted: 2 calls, 10 cents
		{keyTag: r.keyTag("one"), args: []any{"I"}}, // 2, 10
		r.settleOp(b), // 1 call, 5 cents
		{keyTag: r.keyTag("one"), args: []any{"H", "b", r.ttl.Milliseconds()}}, // b is gone
		{keyTag: r.keyTag("one"), args: []any{"H", "e", r.ttl.Milliseconds()}}, // e lives
		one("f", 5), // admitted: 2 calls, 10 cents
	}
	for _, o := range batch {
		o.done = make(chan struct{})
	}
	r.pipe.send(batch)
	for i, o := range batch {
		if o.err != nil {
			t.Fatalf("op %d: %v", i, o.err)
		}
	}
	admit := func(i int, id string, cents int64) (*Lease, error) {
		return r.admitted("one", Call{ID: id, Cents: cents}, lim, batch[i].reply)
	}
	wantLease := func(i int, id string, cents int64, n int, committed int64) {
		t.Helper()
		l, err := admit(i, id, cents)
		if err != nil || l.InFlight != n || l.CommittedCents != committed {
			t.Errorf("op %d (%s): %+v %v, want %d in flight, %d cents", i, id, l, err, n, committed)
		}
	}
	wantRefusal := func(i int, id string, reason Reason, current int64) {
		t.Helper()
		_, err := admit(i, id, 1)
		var ref *Refusal
		if !errors.As(err, &ref) || ref.Reason != reason || ref.Current != current {
			t.Errorf("op %d (%s): %v, want %s refusal at %d", i, id, err, reason, current)
		}
	}
	wantLease(0, "a", 4, 1, 4)
	if l, err := r.admitted("two", Call{ID: "x", Cents: 9}, lim, batch[1].reply); err != nil || l.InFlight != 1 || l.CommittedCents != 9 {
		t.Errorf("other workspace: %+v %v", l, err)
	}
	if _, err := admit(2, "a", 1); !errors.Is(err, ErrDuplicateCall) {
		t.Errorf("duplicate: %v", err)
	}
	wantLease(3, "b", 5, 2, 9)
	wantRefusal(4, "c", ReasonInFlight, 2)
	wantRefusal(6, "d", ReasonSpend, 5)
	wantLease(7, "e", 5, 2, 10)
	if got := fmt.Sprint(batch[8].reply); got != "[2 10]" {
		t.Errorf("inspect: %s, want [2 10]", got)
	}
	if batch[10].reply != int64(0) || batch[11].reply != int64(1) {
		t.Errorf("heartbeats: %v %v, want 0 1", batch[10].reply, batch[11].reply)
	}
	wantLease(12, "f", 5, 2, 10)
	n, cents, err := r.Inspect(context.Background(), "one")
	if err != nil || n != 2 || cents != 10 {
		t.Errorf("after the batch: %d calls, %d cents (%v), want 2, 10", n, cents, err)
	}
}

// TestSettleOrderedFreesTheSlotForTheNextCall: with one call allowed in
// flight, a call admitted right after the previous one's SettleOrdered
// returned is never refused, however busy the pipeline is.
func TestSettleOrderedFreesTheSlotForTheNextCall(t *testing.T) {
	r := testRedis(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for g := range 8 { // keep pipelines on the wire
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				if _, _, err := r.Inspect(context.Background(), fmt.Sprint("busy", g)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	lim := Limits{MaxInFlight: 1}
	settled := make(chan error, 1000)
	for i := range 500 {
		l, err := r.Admit(ctx, "serial", Call{ID: fmt.Sprint(i), Cents: 1}, lim)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		l.SettleOrdered(func(err error) { settled <- err })
	}
	cancel()
	wg.Wait()
	for range 500 {
		if err := <-settled; err != nil {
			t.Fatal(err)
		}
	}
	if n, _, err := r.Inspect(context.Background(), "serial"); err != nil || n != 0 {
		t.Fatalf("%d in flight (%v) after every settle", n, err)
	}
}

// TestPipelinerCancelledContext: an operation whose context already ended
// is not sent.
func TestPipelinerCancelledContext(t *testing.T) {
	r := testRedis(t, 0)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.Admit(ctx, "ws", Call{ID: "a", Cents: 1}, Limits{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
}

// TestGroupKeepsEachWorkspacesOrder: one script call per workspace run,
// split at maxOpsPerScript, every workspace's ops in their order, with few
// and with many workspaces.
func TestGroupKeepsEachWorkspacesOrder(t *testing.T) {
	for _, workspaces := range []int{1, 3, 40} {
		var batch []*op
		for i := range 3*maxOpsPerScript + 7 {
			tag := fmt.Sprintf("p{ws%d}:", (i*7)%workspaces)
			batch = append(batch, &op{keyTag: tag, args: []any{"S", fmt.Sprint(i), -1, 0, 0, 0}})
		}
		calls := group(batch)
		next := map[string]int{} // position in batch of the last op seen per workspace
		seen := 0
		for _, c := range calls {
			if len(c.ops) == 0 || len(c.ops) > maxOpsPerScript || len(c.args) != 6*len(c.ops) {
				t.Fatalf("%d workspaces: call with %d ops, %d args", workspaces, len(c.ops), len(c.args))
			}
			for _, o := range c.ops {
				if o.keyTag != c.keyTag {
					t.Fatalf("op of %s in the call of %s", o.keyTag, c.keyTag)
				}
				pos := 0
				fmt.Sscan(o.args[1].(string), &pos)
				if last, ok := next[o.keyTag]; ok && pos <= last {
					t.Fatalf("%s: op %d after op %d", o.keyTag, pos, last)
				}
				next[o.keyTag] = pos
				seen++
			}
		}
		if seen != len(batch) {
			t.Fatalf("%d of %d ops grouped", seen, len(batch))
		}
	}
}

// settleStarted starts l's ordered settle and returns where its result arrives.
func settleStarted(l *Lease) chan error {
	settled := make(chan error, 1)
	l.SettleOrdered(func(err error) { settled <- err })
	return settled
}

// pipelineCounter counts the pipelines a client sends.
type pipelineCounter struct{ n atomic.Int64 }

func (c *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (c *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (c *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

// countingRedis is testRedis with a pipeline counter and the given linger.
func countingRedis(t *testing.T, linger time.Duration) (*Redis, *pipelineCounter) {
	t.Helper()
	r := testRedis(t, 0)
	counter := &pipelineCounter{}
	r.pipe.client.AddHook(counter)
	r.pipe.linger = linger
	// Cache the script first so that NOSCRIPT retries do not count.
	if _, _, err := r.Inspect(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	counter.n.Store(0)
	return r, counter
}

// TestSettleRidesWithTheNextAdmission: a settle started while nothing is
// on the wire waits for the next admission and goes out ahead of it in the
// same pipeline: one round trip for both, and the admission (one call
// allowed in flight) finds the slot free. (The next call costs more than
// the slot reserves, so the slot cannot be handed over instead.)
func TestSettleRidesWithTheNextAdmission(t *testing.T) {
	r, counter := countingRedis(t, time.Hour) // only an admission can carry it
	ctx := context.Background()
	lim := Limits{MaxInFlight: 1}
	l, err := r.Admit(ctx, "serial", Call{ID: "first", Cents: 1}, lim)
	if err != nil {
		t.Fatal(err)
	}
	settled := settleStarted(l)
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("%d pipelines after an admission and a started settle, want 1 (the settle lingers)", got)
	}
	second, err := r.Admit(ctx, "serial", Call{ID: "second", Cents: 2}, lim)
	if err != nil {
		t.Fatalf("the next admission: %v", err)
	}
	if err := <-settled; err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got != 2 {
		t.Fatalf("%d pipelines, want 2: the settle goes with the next admission", got)
	}
	if err := second.Settle(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLingeringSettleGoesOutAlone: with nothing else to carry it, a
// started settle is sent when its linger ends.
func TestLingeringSettleGoesOutAlone(t *testing.T) {
	r, counter := countingRedis(t, 5*time.Millisecond)
	ctx := context.Background()
	l, err := r.Admit(ctx, "alone", Call{ID: "a", Cents: 3}, Limits{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	settled := settleStarted(l)
	select {
	case err := <-settled:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lingering settle was never sent")
	}
	if n, cents, err := r.Inspect(ctx, "alone"); err != nil || n != 0 || cents != 0 {
		t.Fatalf("%d in flight, %d cents (%v) after the settle, want 0, 0", n, cents, err)
	}
	if got := counter.n.Load(); got != 3 { // admit, settle, inspect
		t.Fatalf("%d pipelines, want 3", got)
	}
}

// TestCloseSendsLingeringSettles: Close does not drop a settle that is
// still lingering; another client sees the slot free right after.
func TestCloseSendsLingeringSettles(t *testing.T) {
	r, _ := countingRedis(t, time.Hour)
	ctx := context.Background()
	l, err := r.Admit(ctx, "closing", Call{ID: "a", Cents: 3}, Limits{MaxInFlight: 1})
	if err != nil {
		t.Fatal(err)
	}
	settled := settleStarted(l)
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatal("Close returned before the lingering settle was done")
	}
	other, err := NewRedis(r.client, r.prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, cents, err := other.Inspect(ctx, "closing"); err != nil || n != 0 || cents != 0 {
		t.Fatalf("%d in flight, %d cents (%v) after Close, want 0, 0", n, cents, err)
	}
}

// gate holds every pipeline until released, and reports each arrival.
type gate struct {
	arrived chan struct{}
	release chan struct{}
}

// holdPipelines makes r's pipelines wait at a gate from now on.
func holdPipelines(r *Redis) *gate {
	g := &gate{arrived: make(chan struct{}, 8), release: make(chan struct{})}
	r.pipe.client.AddHook(g)
	return g
}

func (g *gate) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (g *gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (g *gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.arrived <- struct{}{}
		<-g.release
		return next(ctx, cmds)
	}
}

// TestCloseWaitsForQueuedSettles: a settle queued behind a pipeline on the
// wire has reached Redis when Close returns.
func TestCloseWaitsForQueuedSettles(t *testing.T) {
	r, _ := countingRedis(t, time.Hour)
	ctx := context.Background()
	lim := Limits{MaxInFlight: 2}
	first, err := r.Admit(ctx, "queued", Call{ID: "first", Cents: 3}, lim)
	if err != nil {
		t.Fatal(err)
	}
	g := holdPipelines(r)
	admitted := make(chan error, 1)
	go func() {
		l, err := r.Admit(ctx, "queued", Call{ID: "second", Cents: 4}, lim)
		if err == nil {
			err = l.Settle(ctx) // after Close's drain or before: either way it must not hang
		}
		admitted <- err
	}()
	<-g.arrived // the second admission is on the wire
	first.SettleOrdered(func(error) {})
	closed := make(chan error, 1)
	go func() { closed <- r.Close() }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a pipeline was on the wire", err)
	case <-time.After(50 * time.Millisecond):
	}
	close(g.release)
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	other, err := NewRedis(r.client, r.prefix, 0)
	if err != nil {
		t.Fatal(err)
	}
	// "first" is settled; "second" may still hold its lease.
	if n, cents, err := other.Inspect(ctx, "queued"); err != nil || cents > 4 || n > 1 {
		t.Fatalf("%d in flight, %d cents (%v) after Close: the queued settle was not sent", n, cents, err)
	}
	if err := <-admitted; err != nil {
		t.Fatal(err)
	}
}
