package limits

import "fmt"

// Resume returns a Lease for a call admitted earlier, possibly by another
// gateway process that has since died, so that the call can still be
// settled: Settle frees whatever the old lease still holds (its slot keeps
// the call's id: a Resumable call's slot is never handed over), and nothing
// when its first owner settled it already. The returned lease is not
// counted against any limit and must not be kept alive.
func Resume(l Limiter, workspace, callID string) (*Lease, error) {
	if err := validateWorkspace(workspace); err != nil {
		return nil, err
	}
	if callID == "" || len(callID) > maxIDLen {
		return nil, fmt.Errorf("%w: call id must be 1..%d bytes", ErrInvalid, maxIDLen)
	}
	st, ok := l.(leaseStore)
	if !ok {
		return nil, fmt.Errorf("%w: limiter %T cannot resume leases", ErrInvalid, l)
	}
	return &Lease{ID: callID, Workspace: workspace, TTL: DefaultLeaseTTL, store: st, resumed: true}, nil
}
