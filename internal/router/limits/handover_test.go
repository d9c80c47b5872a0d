package limits

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/comfygate/comfygate/storage/pgtest"
)

// observer is another process's view of r's keys: its own client, so
// that r's pipeline counter does not see its calls.
func observer(t *testing.T, r *Redis) *Redis {
	t.Helper()
	opts, err := redis.ParseURL(pgtest.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { c.Close() })
	o, err := NewRedis(c, r.prefix, r.ttl)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func wantInFlight(t *testing.T, l *Redis, ws string, n int, cents int64) {
	t.Helper()
	gotN, gotCents, err := l.Inspect(context.Background(), ws)
	if err != nil || gotN != n || gotCents != cents {
		t.Fatalf("%s: %d in flight, %d cents (%v), want %d, %d", ws, gotN, gotCents, err, n, cents)
	}
}

// TestSettlingSlotIsHandedOver: the next admission of the workspace takes
// the slot of a call whose settle has not been sent, without a round
// trip; to everyone else the slot stays taken, with its reservation, and
// the new lease heartbeats and settles it.
func TestSettlingSlotIsHandedOver(t *testing.T) {
	r, counter := countingRedis(t, time.Hour)
	other := observer(t, r)
	ctx := context.Background()
	lim := Limits{MaxInFlight: 1, SpendCeilingCents: 10}
	first, err := r.Admit(ctx, "serial", Call{ID: "first", Cents: 5}, lim)
	if err != nil {
		t.Fatal(err)
	}
	settled := settleStarted(first)
	second, err := r.Admit(ctx, "serial", Call{ID: "second", Cents: 3}, lim)
	if err != nil {
		t.Fatal(err)
	}
	if got := counter.n.Load(); got != 1 {
		t.Fatalf("%d pipelines, want 1 (the first admission): the slot was not handed over", got)
	}
	select {
	case err := <-settled:
		if err != nil {
			t.Fatalf("the handed-over call's settle reported %v", err)
		}
	default:
		t.Fatal("the handed-over call's settle is still pending")
	}
	if second.ID != "second" || second.Cents != 5 || second.InFlight != 1 || second.CommittedCents != 5 {
		t.Fatalf("second lease %+v: want id second holding the slot's 5 cents, 1 call, 5 cents committed", second)
	}
	wantInFlight(t, other, "serial", 1, 5)
	if _, err := other.Admit(ctx, "serial", Call{ID: "elsewhere", Cents: 1}, lim); !isRefusal(err, ReasonInFlight) {
		t.Fatalf("another process's admission: %v, want an in_flight refusal", err)
	}
	if err := second.Heartbeat(ctx); err != nil {
		t.Fatalf("heartbeat of the handed-over lease: %v", err)
	}
	if err := second.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, other, "serial", 0, 0)
}

func isRefusal(err error, reason Reason) bool {
	var ref *Refusal
	return errors.As(err, &ref) && ref.Reason == reason
}

// TestNoHandover: whenever the store has something to check or change, the
// next admission goes to Redis, with the lingering settle ahead of it.
func TestNoHandover(t *testing.T) {
	base := Limits{MaxInFlight: 1, SpendCeilingCents: 10}
	withRate := base
	withRate.Rate = []Window{{Name: "minute", Period: time.Minute, Max: 100}}
	cases := []struct {
		name string
		// first is admitted under base and settled; second is admitted
		// under lim.
		second  Call
		lim     Limits
		otherWS bool
		wait    time.Duration // between the settle and the next admission
		// before the first call's settle starts: Call.Resumable, a
		// heartbeat that finds the slot gone, Close.
		resumable, lost, closed bool
	}{
		{name: "costs more than the slot", second: Call{ID: "b", Cents: 6}, lim: base},
		{name: "rate window", second: Call{ID: "b", Cents: 5}, lim: withRate},
		{name: "other in-flight cap", second: Call{ID: "b", Cents: 5}, lim: Limits{MaxInFlight: 2, SpendCeilingCents: 10}},
		{name: "other ceiling", second: Call{ID: "b", Cents: 5}, lim: Limits{MaxInFlight: 1, SpendCeilingCents: 20}},
		{name: "other workspace", second: Call{ID: "b", Cents: 5}, lim: base, otherWS: true},
		{name: "slot renewed TTL/3 ago", second: Call{ID: "b", Cents: 5}, lim: base, wait: 120 * time.Millisecond},
		{name: "settling call resumable", resumable: true, second: Call{ID: "b", Cents: 5}, lim: base},
		{name: "slot found lost", lost: true, second: Call{ID: "b", Cents: 5}, lim: base},
		{name: "limiter closed", closed: true, second: Call{ID: "b", Cents: 5}, lim: base},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, counter := countingRedis(t, time.Hour)
			r.ttl = 300 * time.Millisecond
			other := observer(t, r)
			ctx := context.Background()
			ws, ws2 := "one", "one"
			if tc.otherWS {
				ws2 = "two"
			}
			first, err := r.Admit(ctx, ws, Call{ID: "a", Cents: 5, Resumable: tc.resumable}, base)
			if err != nil {
				t.Fatal(err)
			}
			if tc.lost {
				if err := r.client.Del(ctx, r.key(ws, "leases"), r.key(ws, "cost")).Err(); err != nil {
					t.Fatal(err)
				}
				if err := first.Heartbeat(ctx); !errors.Is(err, ErrLeaseLost) {
					t.Fatalf("heartbeat of a deleted slot: %v, want ErrLeaseLost", err)
				}
			}
			if tc.closed {
				if err := r.Close(); err != nil {
					t.Fatal(err)
				}
			}
			settled := settleStarted(first)
			time.Sleep(tc.wait)
			before := counter.n.Load()
			second, err := r.Admit(ctx, ws2, tc.second, tc.lim)
			if err != nil {
				t.Fatal(err)
			}
			if got := counter.n.Load() - before; got != 1 {
				t.Fatalf("%d pipelines for the admission, want 1: it must go to Redis", got)
			}
			if err := <-settled; err != nil {
				t.Fatal(err)
			}
			if second.slotName() != tc.second.ID || second.Cents != tc.second.Cents {
				t.Fatalf("second lease holds slot %q with %d cents, want its own slot with %d", second.slotName(), second.Cents, tc.second.Cents)
			}
			if tc.otherWS {
				wantInFlight(t, other, ws, 0, 0)
			}
			wantInFlight(t, other, ws2, 1, tc.second.Cents)
			if err := second.Settle(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestHandoverChainRenewsThroughRedis: a caller making short calls back
// to back keeps one slot by handover, and goes to Redis for a fresh slot
// once the slot is TTL/3 old (here shorter than maxHandoverAge), so the
// slot never expires under a running call, although no call lives long
// enough to heartbeat.
func TestHandoverChainRenewsThroughRedis(t *testing.T) {
	r, counter := countingRedis(t, time.Hour)
	r.ttl = 450 * time.Millisecond
	other := observer(t, r)
	ctx := context.Background()
	lim := Limits{MaxInFlight: 1}
	var settles []chan error
	calls, end := 0, time.Now().Add(3*r.ttl)
	for ; time.Now().Before(end); calls++ {
		l, err := r.Admit(ctx, "chain", Call{ID: fmt.Sprint("call-", calls), Cents: 1}, lim)
		if err != nil {
			t.Fatalf("call %d: %v", calls, err)
		}
		time.Sleep(5 * time.Millisecond) // the partner works
		wantInFlight(t, other, "chain", 1, 1)
		settles = append(settles, settleStarted(l))
	}
	// Every admission that went to Redis was one pipeline.
	viaRedis := int(counter.n.Load())
	if limit := int(3*r.ttl/(r.ttl/3)) + 2; viaRedis > limit || viaRedis >= calls {
		t.Fatalf("%d of %d admissions went to Redis, want at most %d (one per TTL/3)", viaRedis, calls, limit)
	}
	if viaRedis < 3 {
		t.Fatalf("%d of %d admissions went to Redis in 3 TTLs: the slot was not renewed every TTL/3", viaRedis, calls)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for i, s := range settles {
		if err := <-s; err != nil {
			t.Fatalf("settle %d: %v", i, err)
		}
	}
	wantInFlight(t, other, "chain", 0, 0)
}

// TestFirstBeatFollowsTheRenewal: KeepAlive's first heartbeat is due TTL/3
// after the slot's last renewal, which a handed-over lease inherits.
func TestFirstBeatFollowsTheRenewal(t *testing.T) {
	now := int64(1000 * time.Second)
	ttl := 30 * time.Second
	cases := []struct {
		name    string
		renewed int64 // 0: unknown
		want    time.Duration
	}{
		{"renewal unknown (Memory, Resume, lost)", 0, 10 * time.Second},
		{"renewed now", now, 10 * time.Second},
		{"renewed 4 s ago", now - int64(4*time.Second), 6 * time.Second},
		{"renewed TTL/3 ago", now - int64(10*time.Second), 0},
		{"renewed long ago", now - int64(time.Minute), 0},
	}
	for _, tc := range cases {
		l := &Lease{TTL: ttl}
		l.renewed.Store(tc.renewed)
		if got := l.firstBeat(now); got != tc.want {
			t.Errorf("%s: first heartbeat after %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestQueuedSettleIsHandedOverOnlyWhenLast: behind a pipeline on the
// wire, the next admission takes a queued settle's slot at once, but not
// when another operation of the workspace was queued after the settle: that
// one was promised to run after it.
func TestQueuedSettleIsHandedOverOnlyWhenLast(t *testing.T) {
	r, _ := countingRedis(t, time.Hour)
	other := observer(t, r)
	ctx := context.Background()
	lim := Limits{MaxInFlight: 2}
	a, err := r.Admit(ctx, "queued", Call{ID: "a", Cents: 3}, lim)
	if err != nil {
		t.Fatal(err)
	}
	g := holdPipelines(r)
	inspected := make(chan error, 2)
	go func() { _, _, err := r.Inspect(ctx, "elsewhere"); inspected <- err }()
	<-g.arrived // a pipeline is on the wire: what follows queues
	settledA := settleStarted(a)
	b, err := r.Admit(ctx, "queued", Call{ID: "b", Cents: 3}, lim) // must not wait for the gate
	if err != nil {
		t.Fatal(err)
	}
	if b.slotName() != "a" {
		t.Fatalf("b holds slot %q, want a's", b.slotName())
	}
	if err := <-settledA; err != nil {
		t.Fatal(err)
	}
	settledB := settleStarted(b)
	go func() { _, _, err := r.Inspect(ctx, "queued"); inspected <- err }() // queued after b's settle
	for queued := 0; queued < 2; {                                          // b's settle and the inspection
		time.Sleep(time.Millisecond)
		r.pipe.mu.Lock()
		queued = len(r.pipe.queue)
		r.pipe.mu.Unlock()
	}
	admitted := make(chan *Lease, 1)
	go func() {
		c, err := r.Admit(ctx, "queued", Call{ID: "c", Cents: 3}, lim)
		if err != nil {
			t.Error(err)
		}
		admitted <- c
	}()
	select {
	case c := <-admitted:
		t.Fatalf("c was admitted (slot %q) while the pipeline was held: it jumped the queue", c.slotName())
	case <-time.After(100 * time.Millisecond):
	}
	close(g.release)
	c := <-admitted
	if c == nil {
		t.FailNow()
	}
	if c.slotName() != "c" {
		t.Fatalf("c holds slot %q, want its own", c.slotName())
	}
	for range 2 {
		if err := <-inspected; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-settledB; err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, other, "queued", 1, 3)
	if err := c.Settle(ctx); err != nil {
		t.Fatal(err)
	}
	wantInFlight(t, other, "queued", 0, 0)
}

// TestHandoverLeavesNoArrayToShare: after a handover empties the lingering
// ops, the next pipeline's batch must not share their array, or a settle
// started while the batch's replies are delivered would overwrite the
// batch's first op (and be reported done before it was sent).
func TestHandoverLeavesNoArrayToShare(t *testing.T) {
	r, _ := countingRedis(t, time.Hour)
	ctx := context.Background()
	lim := Limits{MaxInFlight: 2}
	first, err := r.Admit(ctx, "shared", Call{ID: "first", Cents: 1}, lim)
	if err != nil {
		t.Fatal(err)
	}
	settled := settleStarted(first)
	second, err := r.Admit(ctx, "shared", Call{ID: "second", Cents: 1}, lim)
	if err != nil || second.slotName() != "first" {
		t.Fatalf("second lease %+v (%v): want first's slot handed over", second, err)
	}
	<-settled
	p := r.pipe
	leading := &op{keyTag: r.keyTag("elsewhere"), args: []any{"I"}}
	batch := p.enqueue(leading) // this caller leads the next pipeline
	if len(batch) != 1 || batch[0] != leading {
		t.Fatalf("batch %v, want the one operation", batch)
	}
	// As lead does once the replies are in: the pipeline is idle again
	// while the batch's replies are delivered, and a settle may start.
	p.mu.Lock()
	p.busy = false
	p.mu.Unlock()
	later := settleStarted(second)
	if batch[0] != leading {
		t.Fatal("a settle started later overwrote the batch being delivered")
	}
	p.drain()
	if err := <-later; err != nil {
		t.Fatal(err)
	}
}
