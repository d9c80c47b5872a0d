// Package limits is per-workspace admission control for model-router calls:
// how many calls a workspace may have in flight, how many cents of partner
// spend those calls may commit, and windowed rate allowances. (Credits are
// not the limiter's: model_router's require_credits draws from the account
// credit ledger in storage, shared with jobs; see calls.Credits.)
//
// The point is crash safety. Every admitted call is a lease with an expiry,
// not a counter: a gateway killed mid-call leaves leases that expire within
// one TTL and are reaped by the next admission, so a lost release can never
// lock a workspace out (the failure that made LiteLLM's counters leak). The
// caller heartbeats the lease while the provider works and settles it on a
// context a client disconnect cannot cancel.
//
// Two implementations share the semantics and one test suite
// (limitstest.Run): Redis (Lua scripts, pipelined, server clock) for
// multi-instance deployments and Memory (mutex, injectable clock) for the
// embedded single-process default.
//
// Order of checks at admission, first failing one wins: in-flight count,
// committed spend, rate windows (in the order given). A refused
// call changes nothing: it takes no slot, reserves no spend and consumes no
// rate allowance.
package limits

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"
)

// DefaultLeaseTTL is used when a limiter is built with a zero TTL. Heartbeats
// run every TTL/3 (see Lease.KeepAlive), so a live call survives two missed
// heartbeats and a dead gateway's calls free their slots within 30 s.
const DefaultLeaseTTL = 30 * time.Second

// MinLeaseTTL bounds the TTL from below: Redis scores are in milliseconds and
// a TTL shorter than a round trip would expire leases as they are granted.
const MinLeaseTTL = 100 * time.Millisecond

// MaxCents bounds every cents value (prices, ceilings). Lua numbers
// are doubles, exact only up to 2^53; 2^50 cents is about 11 trillion dollars.
const MaxCents = int64(1) << 50

var (
	// ErrUnavailable wraps every failure to reach the limiter's store. The
	// handler fails closed: 503 service_unavailable.
	ErrUnavailable = errors.New("limits: store unavailable")
	// ErrLeaseLost is returned by Heartbeat when the lease expired (and was
	// or will be reaped) or was already settled. The call no longer counts
	// against the workspace's limits.
	ErrLeaseLost = errors.New("limits: lease lost")
	// ErrDuplicateCall is returned by Admit when call.ID already holds a
	// lease in the workspace. Re-admitting it would overwrite the lease
	// without counting it, so it is refused as a programming error. (An
	// admission that takes a slot over does not ask Redis and so does not
	// check: call ids must be unique, as request ids are.)
	ErrDuplicateCall = errors.New("limits: call id already in flight")
	// ErrInvalid marks malformed arguments (empty ids, bad windows, cents out
	// of range). It is a programming or configuration error, not a refusal.
	ErrInvalid = errors.New("limits: invalid argument")
)

// Window is a sliding-window rate allowance: at most Max admissions in any
// Period, exactly (a log of admission times, not an approximate counter), so
// storage is O(Max) per workspace and window: fine for partner-call limits
// in the hundreds or thousands. Name appears in the refusal (and in the 429
// detail), so keep it short and stable, for example "minute" or "day".
type Window struct {
	Name   string
	Period time.Duration
	Max    int
}

// Limits is what one workspace may do. The zero value admits everything.
type Limits struct {
	// MaxInFlight caps concurrent calls; 0 means unlimited.
	MaxInFlight int
	// SpendCeilingCents caps the sum of Call.Cents over calls in flight;
	// 0 means unlimited.
	SpendCeilingCents int64
	// Rate lists windowed allowances; every one must have room.
	Rate []Window
}

// Call is one model call asking for admission.
type Call struct {
	// ID is unique per call, for example the X-Service-Request-Id.
	ID string
	// Cents is the call's price, reserved against the spend ceiling while
	// it is in flight.
	Cents int64
	// Resumable marks a call another process may settle by its ID through
	// Resume (a call whose record a same-key retry can take over): its slot
	// must keep the call's ID to the end, so it is never handed over to
	// another call (see Redis.handOver). Such a call may still take over
	// another call's slot.
	Resumable bool
}

// Reason says which limit refused a call.
type Reason string

const (
	// ReasonInFlight: MaxInFlight calls already in flight → 429 concurrency_limit_exceeded.
	ReasonInFlight Reason = "in_flight"
	// ReasonSpend: the spend ceiling has no room for the call → 429
	// concurrency_limit_exceeded with the X-Committed-Spend-* headers.
	ReasonSpend Reason = "spend"
	// ReasonRate: a window's allowance is spent → 429 rate_limited + Retry-After.
	ReasonRate Reason = "rate"
)

// Refusal is a typed admission refusal. The numbers depend on Reason:
//
//   - InFlight: Limit = MaxInFlight, Current = calls in flight, Remaining = 0.
//   - Spend: Limit = ceiling cents, Current = cents committed by calls in
//     flight EXCLUDING the refused call, Remaining = max(0, Limit-Current)
//     (positive when the call costs more than what remains).
//   - Rate: Limit = Window.Max, Current = admissions in the window,
//     Remaining = 0, Window = its name, RetryAfter = time until the oldest
//     counted admission leaves the window.
type Refusal struct {
	Reason     Reason
	Limit      int64
	Current    int64
	Remaining  int64
	Window     string
	RetryAfter time.Duration
}

func (r *Refusal) Error() string {
	switch r.Reason {
	case ReasonRate:
		return fmt.Sprintf("limits: refused: rate window %q: %d/%d, retry after %v", r.Window, r.Current, r.Limit, r.RetryAfter)
	default:
		return fmt.Sprintf("limits: refused: %s: current %d, limit %d, remaining %d", r.Reason, r.Current, r.Limit, r.Remaining)
	}
}

// Detail is a client-safe sentence for the 429 body's detail: it names
// the limit that applied, as the contract asks.
func (r *Refusal) Detail() string {
	switch r.Reason {
	case ReasonInFlight:
		return fmt.Sprintf("concurrent call limit reached: %d of %d calls in flight; retry when one of your calls finishes", r.Current, r.Limit)
	case ReasonSpend:
		return fmt.Sprintf("committed spend limit reached: %d of %d cents committed to calls in flight; retry when one of your calls finishes", r.Current, r.Limit)
	case ReasonRate:
		return fmt.Sprintf("rate limit window %q spent: %d of %d calls", r.Window, r.Current, r.Limit)
	}
	return "call refused"
}

// SpendHeaders returns the X-Committed-Spend-{Limit,Current,Remaining}
// headers for a Spend refusal and nil for any other reason (the contract
// sends them only when the spend ceiling caused the rejection).
func (r *Refusal) SpendHeaders() http.Header {
	if r.Reason != ReasonSpend {
		return nil
	}
	h := http.Header{}
	h.Set("X-Committed-Spend-Limit", strconv.FormatInt(r.Limit, 10))
	h.Set("X-Committed-Spend-Current", strconv.FormatInt(r.Current, 10))
	h.Set("X-Committed-Spend-Remaining", strconv.FormatInt(r.Remaining, 10))
	return h
}

// RetryAfterSeconds is RetryAfter rounded up to whole seconds, at least 1
// for a Rate refusal (Retry-After is integer seconds) and 0 otherwise.
func (r *Refusal) RetryAfterSeconds() int {
	if r.Reason != ReasonRate {
		return 0
	}
	s := int((r.RetryAfter + time.Second - 1) / time.Second)
	return max(s, 1)
}

// Limiter admits calls. Both implementations are safe for concurrent use.
//
// Redis round trips (the Redis implementation; Memory makes none): an
// admitted call costs at most 1 for Admit + 1 for Settle + 1 per heartbeat,
// that is 2 + floor(duration / (TTL/3)) with Lease.KeepAlive; a refused call
// costs 1. Operations of concurrent calls share round trips (and script
// calls, per workspace): those issued while a pipeline is on the wire go
// out together in the next one. An admission that takes over the slot of a
// call still settling costs none (see Redis.handOver). The first use of the
// script on a server adds one round trip (EVALSHA answered NOSCRIPT, then
// EVAL), once per server lifetime.
type Limiter interface {
	// Admit reserves a slot, the call's cents and one unit of every rate
	// window for call in workspace, atomically. A refusal is a *Refusal; a
	// store failure wraps ErrUnavailable. If the reply to a successful
	// admission is lost, the orphaned lease expires within one TTL.
	Admit(ctx context.Context, workspace string, call Call, lim Limits) (*Lease, error)
	// Inspect reports the calls in flight and the cents they commit,
	// ignoring leases past their expiry. It does not modify state.
	Inspect(ctx context.Context, workspace string) (count int, cents int64, err error)
	// Close releases the store connection when the limiter owns it.
	Close() error
}

// RoundTrips is the number of Redis round trips the Redis limiter spends on
// one admitted call that holds its lease for d with Lease.KeepAlive under
// lease TTL ttl (0 = DefaultLeaseTTL) when no other call shares them or
// takes its slot over: Admit 1 + Settle 1 + one heartbeat per TTL/3
// elapsed. A refused call costs 1. Script loading (NOSCRIPT then EVAL)
// adds 1 once per Redis server start and is not counted. Memory makes none.
func RoundTrips(d, ttl time.Duration) int {
	if ttl <= 0 {
		ttl = DefaultLeaseTTL
	}
	return 2 + int(d/(ttl/3))
}

// plainNamePattern is what plainName accepts, for error messages.
const plainNamePattern = `^[A-Za-z0-9_.-]{1,64}$`

// maxIDLen bounds call ids and workspace names so keys stay bounded.
const maxIDLen = 256

func validate(workspace string, call Call, lim Limits) error {
	switch {
	case workspace == "" || len(workspace) > maxIDLen:
		return fmt.Errorf("%w: workspace must be 1..%d bytes", ErrInvalid, maxIDLen)
	case call.ID == "" || len(call.ID) > maxIDLen:
		return fmt.Errorf("%w: call id must be 1..%d bytes", ErrInvalid, maxIDLen)
	case call.Cents < 0 || call.Cents > MaxCents:
		return fmt.Errorf("%w: call cents %d out of range", ErrInvalid, call.Cents)
	case lim.MaxInFlight < 0:
		return fmt.Errorf("%w: MaxInFlight %d is negative", ErrInvalid, lim.MaxInFlight)
	case lim.SpendCeilingCents < 0 || lim.SpendCeilingCents > MaxCents:
		return fmt.Errorf("%w: spend ceiling %d out of range", ErrInvalid, lim.SpendCeilingCents)
	}
	for i, w := range lim.Rate {
		if !plainName(w.Name) || slices.ContainsFunc(lim.Rate[:i], func(o Window) bool { return o.Name == w.Name }) {
			return fmt.Errorf("%w: window name %q must be unique and match %s", ErrInvalid, w.Name, plainNamePattern)
		}
		if w.Period < time.Millisecond || w.Max < 1 {
			return fmt.Errorf("%w: window %q needs Period >= 1ms and Max >= 1", ErrInvalid, w.Name)
		}
	}
	return nil
}

func validateWorkspace(workspace string) error {
	if workspace == "" || len(workspace) > maxIDLen {
		return fmt.Errorf("%w: workspace must be 1..%d bytes", ErrInvalid, maxIDLen)
	}
	return nil
}

func normalizeTTL(ttl time.Duration) (time.Duration, error) {
	if ttl == 0 {
		return DefaultLeaseTTL, nil
	}
	if ttl < MinLeaseTTL {
		return 0, fmt.Errorf("%w: lease TTL %v below %v", ErrInvalid, ttl, MinLeaseTTL)
	}
	return ttl, nil
}
