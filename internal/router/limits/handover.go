package limits

import "time"

// A caller that makes call after call holds a slot from the moment one
// call is admitted until shortly after its last one ends: each call's
// settle lingers (see startLinger) and its next admission frees and takes
// the slot again in one script call. handOver skips that round trip: while
// the settle has not been sent, the next admission of the same workspace
// through this process takes the settling call's slot over, and the settle
// is dropped. The store ends up where sending both would have left it —
// same calls in flight, same committed cents — as long as
//
//   - the new call consumes no rate allowance (that needs the store);
//   - the settling call is not Resumable: another process may settle it
//     by its ID, which would free the slot under the new call;
//   - the slot was admitted under the same in-flight cap and spend ceiling
//     (a configuration change goes through the store);
//   - the new call costs no more than the slot reserves: the slot keeps its
//     reservation, so the workspace looks as busy as before, never less
//     (a cheaper call reserves more than its price until it settles);
//   - the slot was renewed less than maxHandoverAge ago (TTL/3 when that is
//     shorter): the new lease's first heartbeat is due TTL/3 after that
//     renewal, as for a fresh admission, so a handed-over slot never lives
//     on less margin than a new one.
//
// Other processes see no difference: the slot was taken throughout, as it
// would have been with the settle and the admission in one script call.
// (One case differs: when other gateways, configured with a higher cap,
// have filled the workspace beyond this one's cap, the admission would
// have been refused; the handover keeps the count where it was instead of
// lowering it by one. It never raises it.)
//
// A handover asks nothing of Redis, so it also works while Redis is down:
// the calls of a workspace that follow each other on a slot this process
// holds keep running, for at most maxHandoverAge, and any admission that
// needs Redis fails closed as before. That overshoots nothing: the slot
// and its reservation were granted by Redis and are still held.

// maxHandoverAge bounds how long a chain of calls may pass one slot on
// without Redis: each chain renews its slot through Redis this often, which
// also bounds how long it outlives a Redis failure.
const maxHandoverAge = time.Second

// admissionBounds are the limits a handover must find unchanged.
type admissionBounds struct {
	maxInFlight int
	ceiling     int64
}

func boundsOf(lim Limits) admissionBounds {
	return admissionBounds{maxInFlight: lim.MaxInFlight, ceiling: lim.SpendCeilingCents}
}

// handOver returns a lease for call on a slot a settling call of the same
// workspace frees, or nil when no such slot may be taken over (see above).
func (r *Redis) handOver(workspace string, call Call, lim Limits) *Lease {
	if len(lim.Rate) > 0 || r.closed.Load() {
		return nil
	}
	bounds := boundsOf(lim)
	fresh := monoNow() - int64(min(r.ttl/3, maxHandoverAge))
	o := r.pipe.takeFreed(r.keyTag(workspace), func(l *Lease) bool {
		return l.Cents >= call.Cents && l.admitted == bounds && l.renewed.Load() > fresh
	})
	if o == nil {
		return nil
	}
	old := o.freed
	next := &Lease{
		ID: call.ID, Workspace: workspace, Cents: old.Cents,
		InFlight: old.InFlight, CommittedCents: old.CommittedCents, TTL: r.ttl,
		store: r, slot: old.slotName(), admitted: bounds, resumable: call.Resumable,
	}
	next.renewed.Store(old.renewed.Load())
	// The settling call is done with the slot: its settle succeeded, in
	// the sense that nothing of it is left to send.
	o.onDone(int64(1), nil)
	return next
}
