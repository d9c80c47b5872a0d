package storage

import (
	"errors"
	"fmt"
)

// Fair admission. A pool's MaxQueued (M) is shared by the accounts that
// queue in it, so that one account cannot lock the others out:
//
//   - below M queued jobs, any job is admitted (as without sharing);
//   - from M up to M + M/2 (the overflow), only a job of an account
//     holding fewer than its fair share, M divided by the number of
//     accounts with jobs queued in the pool (at least 1);
//   - from M + M/2 up to 2M (the ceiling), only an account's first job
//     (one with nothing queued in the pool);
//   - at 2M, nothing.
//
// A lone account can thus fill M, exactly as before; another account
// then still gets in, up to its share, and its first job always does
// while the pool is under the ceiling. The last M/2 places are kept for
// first jobs, so an account holding its share cannot be locked out by a
// few others that burst into the overflow. The pool never holds more than
// 2M admitted jobs. AccountMaxQueued, when set, bounds every account on
// top of this.

// Refusal bounds: which bound refused a job (QueueFullError.Bound).
const (
	// BoundAccountMaxQueued: the account holds NewJob.AccountMaxQueued.
	BoundAccountMaxQueued = "account_max_queued"
	// BoundMaxQueued: the pool holds MaxQueued, all of them the account's
	// (its fair share is the whole pool).
	BoundMaxQueued = "max_queued"
	// BoundFairShare: the pool holds MaxQueued or more and the account
	// holds its fair share.
	BoundFairShare = "fair_share"
	// BoundOverflow: the pool holds M + M/2 or more; only first jobs.
	BoundOverflow = "overflow"
	// BoundCeiling: the pool holds 2M; nothing is admitted.
	BoundCeiling = "ceiling"
)

// QueueFullError is a queue-bound refusal: errors.Is(err, ErrQueueFull),
// and ErrAccountQueueFull too when Bound is BoundAccountMaxQueued. Limit
// is the number of queued jobs the refusing bound allows (the account's,
// for account_max_queued, max_queued and fair_share; the pool's, for
// overflow and ceiling).
type QueueFullError struct {
	Bound string
	Limit int
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("storage: queue full (%s %d)", e.Bound, e.Limit)
}

// Is makes a QueueFullError ErrQueueFull, and an account_max_queued one
// ErrAccountQueueFull.
func (e *QueueFullError) Is(target error) bool {
	return target == ErrQueueFull || (target == ErrAccountQueueFull && e.Bound == BoundAccountMaxQueued)
}

// QueueBound returns the bound that refused err and its limit; ok false
// when err is not a queue-bound refusal. A bare ErrQueueFull (or
// ErrAccountQueueFull) reports the pool's (or the account's) bound with
// limit 0.
func QueueBound(err error) (bound string, limit int, ok bool) {
	var qe *QueueFullError
	switch {
	case errors.As(err, &qe):
		return qe.Bound, qe.Limit, true
	case errors.Is(err, ErrAccountQueueFull):
		return BoundAccountMaxQueued, 0, true
	case errors.Is(err, ErrQueueFull):
		return BoundMaxQueued, 0, true
	}
	return "", 0, false
}

// OverflowLimit is M + M/2: from it on, a pool admits only first jobs.
func OverflowLimit(maxQueued int) int { return maxQueued + maxQueued/2 }

// CeilingLimit is 2M, the most queued jobs a pool admits.
func CeilingLimit(maxQueued int) int { return 2 * maxQueued }

// FairShare is an account's share of a pool's MaxQueued with accounts
// accounts holding queued jobs (counting it): at least 1.
func FairShare(maxQueued, accounts int) int {
	if accounts < 1 {
		accounts = 1
	}
	return max(1, maxQueued/accounts)
}

// Admission is what the fair-admission rule reads of a pool's queue.
type Admission struct {
	MaxQueued, AccountMaxQueued int
	// PoolQueued is the pool's queued jobs.
	PoolQueued int
	// AccountQueued is the account's queued jobs in the pool; a backend
	// may count it no further than max(AccountMaxQueued, MaxQueued).
	AccountQueued int
	// Accounts is the number of accounts with jobs queued in the pool,
	// counting this one; only read when PoolQueued is at least MaxQueued
	// and AccountQueued is not 0 (NeedsAccounts).
	Accounts int
}

// NeedsAccounts reports whether Admit reads a.Accounts, so that a backend
// counts them only then.
func (a Admission) NeedsAccounts() bool {
	return a.MaxQueued > 0 && a.PoolQueued >= a.MaxQueued && a.PoolQueued < CeilingLimit(a.MaxQueued) &&
		a.AccountQueued > 0
}

// Admit applies the fair-admission rule: nil, or the *QueueFullError that
// refuses the job.
func Admit(a Admission) error {
	if a.AccountMaxQueued > 0 && a.AccountQueued >= a.AccountMaxQueued {
		return &QueueFullError{Bound: BoundAccountMaxQueued, Limit: a.AccountMaxQueued}
	}
	m := a.MaxQueued
	switch {
	case m <= 0 || a.PoolQueued < m:
		return nil
	case a.PoolQueued >= CeilingLimit(m):
		return &QueueFullError{Bound: BoundCeiling, Limit: CeilingLimit(m)}
	case a.AccountQueued == 0:
		return nil
	}
	if share := FairShare(m, a.Accounts); a.AccountQueued >= share {
		if share >= m {
			return &QueueFullError{Bound: BoundMaxQueued, Limit: m}
		}
		return &QueueFullError{Bound: BoundFairShare, Limit: share}
	}
	if a.PoolQueued >= OverflowLimit(m) {
		return &QueueFullError{Bound: BoundOverflow, Limit: OverflowLimit(m)}
	}
	return nil
}
