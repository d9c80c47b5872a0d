package limits

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// leaseStore is what a Lease needs from the limiter that granted it.
type leaseStore interface {
	heartbeat(ctx context.Context, l *Lease) error
	settle(ctx context.Context, l *Lease) error
	// settleOrdered puts the settle in the store's order before it returns
	// and reports the result to done, possibly from another goroutine.
	settleOrdered(l *Lease, done func(error))
}

// Lease is an admitted call's hold on its workspace's limits. It counts
// until Settle, or until its expiry passes without a Heartbeat.
type Lease struct {
	// ID and Workspace identify the call; Cents is what it reserved.
	ID        string
	Workspace string
	Cents     int64
	// InFlight and CommittedCents are the workspace's totals just after
	// admission, including this call (for X-Committed-Spend-* on admitted
	// responses, where Current includes the call). A lease handed over
	// from a settling call (see Redis) carries the totals its slot was
	// admitted with: a handover leaves both unchanged.
	InFlight       int
	CommittedCents int64
	// TTL is how long the lease lives without a heartbeat.
	TTL time.Duration

	store   leaseStore
	resumed bool // built by Resume: Cents is not what the lease reserved
	// slot is the store's name for the slot this lease holds: ID, or the
	// ID of the call whose lease was handed over to this one.
	slot string
	// renewed is when the slot's expiry was last pushed to TTL ahead (the
	// admission or heartbeat was sent at or before it took effect), on the
	// monotonic clock (monoNow); 0 when unknown or the slot was found lost.
	// KeepAlive's first heartbeat is due TTL/3 after it.
	renewed atomic.Int64
	// resumable: see Call.Resumable.
	resumable bool
	// admitted are the limits the slot was admitted under; a handover
	// needs the same ones (see Redis.handOver).
	admitted admissionBounds

	mu      sync.Mutex
	settled bool
}

// Heartbeat pushes the lease's expiry to now + TTL. It returns ErrLeaseLost
// when the lease already expired or was settled: the call no longer counts
// against the limits, and the caller decides whether to carry on. A store
// failure wraps ErrUnavailable; the lease may still be alive, so retrying on
// the next tick is right.
func (l *Lease) Heartbeat(ctx context.Context) error {
	l.mu.Lock()
	settled := l.settled
	l.mu.Unlock()
	if settled {
		return fmt.Errorf("%w: call %s already settled", ErrLeaseLost, l.ID)
	}
	sent := monoNow()
	if err := l.store.heartbeat(ctx, l); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			l.renewed.Store(0) // nothing left to hand over
		}
		return err
	}
	l.renewed.Store(sent)
	return nil
}

// Settle ends the call: it frees the slot and the reserved cents. It works
// whether or not the lease has expired.
//
// Pass a context a client disconnect cannot cancel, with its own bound:
//
//	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
//	defer cancel()
//	err := lease.Settle(ctx)
//
// Settle is idempotent: after one success further calls return nil and do
// nothing, and settling a slot already freed (by another process, or by its
// expiry) frees nothing else. A failed Settle may be retried; if every
// attempt fails the lease still expires within one TTL.
func (l *Lease) Settle(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.settled {
		return nil
	}
	if err := l.store.settle(ctx, l); err != nil {
		return err
	}
	l.settled = true
	return nil
}

// SettleOrdered is Settle for the moment an answer is about to be written:
// it does not wait for the store, yet the release is ordered before
// anything this process asks the limiter afterwards. When SettleOrdered
// returns, the settle is queued (Redis) or done (Memory), and any Admit this
// process issues from then on is executed after it, so the caller's next
// call can never be refused because of this one's lease. done receives
// Settle's result, on another goroutine for Redis (the one that sends the
// settle, or the Admit that takes the slot over instead); it must be quick
// (start a goroutine for a retry). Another process's Admit is not
// ordered: with Redis the settle reaches the server within one round trip
// plus the linger, unless this process hands its slot on.
//
// Do not call it together with Settle or twice; after a failure, retry with
// Settle.
func (l *Lease) SettleOrdered(done func(error)) {
	l.mu.Lock()
	if l.settled {
		l.mu.Unlock()
		done(nil)
		return
	}
	// The lease is marked settled only once the store confirms; the mutex
	// is not held across the wait, which happens on another goroutine.
	l.mu.Unlock()
	l.store.settleOrdered(l, func(err error) {
		if err == nil {
			l.mu.Lock()
			l.settled = true
			l.mu.Unlock()
		}
		done(err)
	})
}

// KeepAlive heartbeats the lease every TTL/3 until stop is called, ctx
// ends, or the lease is lost. Errors other than the final ErrLeaseLost are
// retried on the next tick; every error is passed to onErr (may be nil) for
// logging. stop waits for a heartbeat in progress, so call it before Settle
// to avoid a heartbeat racing the release (harmless, but noisy: it reports
// ErrLeaseLost). Pass a context the client disconnect does not cancel
// (context.WithoutCancel) when the provider call carries on after the
// client leaves: the spend stays committed until it finishes.
//
// It runs on a timer, not a goroutine: most calls end before their first
// heartbeat is due, and then KeepAlive and stop cost a timer and nothing
// else. The first heartbeat is due TTL/3 after the slot was last renewed,
// which for a handed-over lease is earlier than TTL/3 from now.
func (l *Lease) KeepAlive(ctx context.Context, onErr func(error)) (stop func()) {
	k := &keeper{lease: l, ctx: ctx, onErr: onErr}
	k.mu.Lock()
	k.timer = time.AfterFunc(l.firstBeat(monoNow()), k.tick)
	k.mu.Unlock()
	return k.stop
}

// keeper is one KeepAlive.
type keeper struct {
	lease *Lease
	ctx   context.Context
	onErr func(error)

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
	beating sync.WaitGroup // a heartbeat in progress
}

func (k *keeper) tick() {
	k.mu.Lock()
	if k.stopped || k.ctx.Err() != nil {
		k.mu.Unlock()
		return
	}
	k.beating.Add(1)
	k.mu.Unlock()
	defer k.beating.Done()
	err := k.lease.Heartbeat(k.ctx)
	if err != nil && k.ctx.Err() == nil {
		if k.onErr != nil {
			k.onErr(err)
		}
		if errors.Is(err, ErrLeaseLost) {
			return
		}
	}
	k.mu.Lock()
	if !k.stopped {
		k.timer.Reset(k.lease.TTL / 3)
	}
	k.mu.Unlock()
}

// slotName is the store's name for the lease's slot.
func (l *Lease) slotName() string {
	if l.slot != "" {
		return l.slot
	}
	return l.ID
}

// firstBeat is how long KeepAlive waits for its first heartbeat: TTL/3
// after the slot was last renewed, at once if that has passed; TTL/3 when
// the renewal is unknown. now is monoNow().
func (l *Lease) firstBeat(now int64) time.Duration {
	renewed := l.renewed.Load()
	if renewed == 0 {
		return l.TTL / 3
	}
	return max(0, time.Duration(renewed-now)+l.TTL/3)
}

// monoBase anchors monoNow.
var monoBase = time.Now()

// monoNow is nanoseconds on the monotonic clock (a wall clock stepped back
// must not make an old slot look freshly renewed), always > 0.
func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

func (k *keeper) stop() {
	k.mu.Lock()
	k.stopped = true
	k.timer.Stop()
	k.mu.Unlock()
	k.beating.Wait()
}
