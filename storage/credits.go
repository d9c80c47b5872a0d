package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Credit ledger entry kinds. Every entry's Amount is signed; an account's
// balance is always the sum of its entries' amounts.
const (
	// CreditGrant adds (or, negative, removes) credits by an operator.
	CreditGrant = "grant"
	// CreditReservation holds a job's or call's maximum charge (negative).
	CreditReservation = "reservation"
	// CreditSettlement ends a reservation that was charged: its Amount
	// gives back what the charge did not use (reserved - Charged).
	CreditSettlement = "settlement"
	// CreditRefund ends a reservation that was not charged (a platform
	// fault, a job canceled or expired while queued): the whole reservation
	// comes back.
	CreditRefund = "refund"
)

// MaxCredits bounds every credit amount, price and balance: far beyond any
// real balance, and small enough that a price times a running bound in
// milliseconds cannot overflow int64.
const MaxCredits = int64(1) << 50

var (
	// ErrInsufficientCredits means the account's balance cannot cover a
	// reservation (or a negative grant); nothing was written.
	ErrInsufficientCredits = errors.New("storage: insufficient credits")
	// ErrAccountQueueFull means the account's own queue in the pool is at
	// its bound (NewJob.AccountMaxQueued). It wraps ErrQueueFull.
	ErrAccountQueueFull = fmt.Errorf("storage: account queue full: %w", ErrQueueFull)
)

// OverdraftError refuses a negative grant (a debit) larger than the
// account's balance: it is ErrInsufficientCredits (errors.Is) and says
// what the balance was, so that an operator sees how much can be debited.
type OverdraftError struct {
	AccountID string
	// Balance is the account's balance when the debit was refused (0 for
	// an account without a ledger).
	Balance int64
	// Amount is the refused grant (negative).
	Amount int64
}

func (e *OverdraftError) Error() string {
	return fmt.Sprintf("%v: %s has a balance of %d, a debit of %d would take it below zero",
		ErrInsufficientCredits, e.AccountID, e.Balance, -e.Amount)
}

// Unwrap makes the error ErrInsufficientCredits for errors.Is.
func (e *OverdraftError) Unwrap() error { return ErrInsufficientCredits }

// JobPrice prices a job: CreateJob reserves Reserve credits atomically with
// the job, and the job's terminal transition settles it (see JobCredits).
type JobPrice struct {
	// PerJob is charged once for a job that ran.
	PerJob int64
	// PerSecond is charged per second of the charged attempt, to the
	// millisecond (the total is rounded up to a whole credit).
	PerSecond int64
	// Reserve is the most the job can be charged, held from submission to
	// settlement.
	Reserve int64
}

// Valid reports whether every figure is in 0..MaxCredits and the reserve
// covers at least the per-job charge.
func (p JobPrice) Valid() bool {
	in := func(v int64) bool { return v >= 0 && v <= MaxCredits }
	return in(p.PerJob) && in(p.PerSecond) && in(p.Reserve) && p.Reserve >= p.PerJob
}

// JobCredits is what a priced job reserved and, once settled, was charged.
//
// Settlement happens in the same transaction that moves the job to its
// terminal state, whichever process or reaper does it, so it happens
// exactly once. The charge is min(Reserved, PerJob + ceil(PerSecond ×
// RunMS / 1000)), where RunMS is the last attempt's running time (claim to
// terminal state); it is 0 (a refund) for a job that never started
// running, was handed back to the queue and then ended without another
// attempt, or failed through a platform fault (PlatformFault).
type JobCredits struct {
	PerJob    int64
	PerSecond int64
	Reserved  int64
	// Charged is nil until the job is settled.
	Charged *int64
}

// PlatformFaultCodes are the job.error codes that mean the platform, not
// the workflow, failed: such a job is not charged.
var PlatformFaultCodes = []string{"worker_lost", "upstream_error", "execution_failed"}

// PlatformFault reports whether a job.error object names a platform fault.
func PlatformFault(jobErr json.RawMessage) bool {
	var e struct {
		Code string `json:"code"`
	}
	if len(jobErr) == 0 || json.Unmarshal(jobErr, &e) != nil {
		return false
	}
	for _, c := range PlatformFaultCodes {
		if e.Code == c {
			return true
		}
	}
	return false
}

// JobCharge is the charge of a priced job that ran runMS milliseconds:
// PerJob + ceil(PerSecond × runMS / 1000), at most Reserved. Backends
// compute the same figure in SQL; this is its reference.
func JobCharge(c JobCredits, runMS int64) int64 {
	runMS = max(runMS, 0)
	return min(c.Reserved, c.PerJob+(c.PerSecond*runMS+999)/1000)
}

// CreditEntry is one line of an account's ledger.
type CreditEntry struct {
	// Seq orders an account's entries (increasing; gaps allowed).
	Seq       int64
	AccountID string
	// Kind is one of the Credit* kinds.
	Kind string
	// Amount is signed: what the entry added to the balance.
	Amount int64
	// Charged is, for a settlement, the credits the job or call was charged.
	Charged int64
	// RunMS is, for a job's settlement or refund, the charged attempt's
	// running time in milliseconds.
	RunMS int64
	// JobID or CallID names what a reservation, settlement or refund is
	// for (a router call's request id); both empty for a grant.
	JobID     string
	CallID    string
	Note      string
	CreatedAt time.Time
}

// CreditUsage is one account's use over a period.
type CreditUsage struct {
	AccountID string
	// Jobs counts jobs that reached a terminal state in the period, and
	// ExecutionMS sums their execution time (started to completed).
	Jobs        int64
	ExecutionMS int64
	// RouterCalls counts model-router calls that finished in the period.
	RouterCalls int64
	// Credits sums what the ledger charged in the period (settlements).
	Credits int64
}

// CreditStore is the credit ledger: one balance per account, the sum of an
// append-only list of entries. Jobs reserve and settle through JobStore
// (NewJob.Price); router calls through ReserveCallCredits and
// SettleCallCredits.
type CreditStore interface {
	// GrantCredits appends a grant of amount (non-zero; negative removes
	// credits) with a note, creating the account's ledger on first use.
	// A negative grant that would take the balance below zero is refused,
	// writing nothing, with an *OverdraftError (ErrInsufficientCredits)
	// naming the balance.
	GrantCredits(ctx context.Context, accountID string, amount int64, note string) (CreditEntry, error)
	// CreditBalance returns the account's balance: 0 for an account without
	// a ledger.
	CreditBalance(ctx context.Context, accountID string) (int64, error)
	// CreditLedger returns the account's entries created at or after since,
	// oldest first.
	CreditLedger(ctx context.Context, accountID string, since time.Time) ([]CreditEntry, error)
	// CreditUsage returns every account's use since the given time, by
	// account id.
	CreditUsage(ctx context.Context, since time.Time) ([]CreditUsage, error)
	// ReserveCallCredits holds amount (> 0) of the account's balance for a
	// router call, or returns ErrInsufficientCredits writing nothing.
	// ErrDuplicate when callID already reserved.
	ReserveCallCredits(ctx context.Context, accountID, callID string, amount int64) error
	// SettleCallCredits ends the call's reservation, charging charged
	// (capped at the reservation; 0 is a refund). It reports false, writing
	// nothing, when the call holds no open reservation (never reserved, or
	// already settled): a call is settled exactly once.
	SettleCallCredits(ctx context.Context, callID string, charged int64) (bool, error)
	// SettleStaleCallCredits settles the reservations of calls made before
	// before that are still open (their gateway died): a call whose record
	// finished is charged what the record says it charged, any other is
	// refunded. It returns how many it settled.
	SettleStaleCallCredits(ctx context.Context, before time.Time) (int, error)
}
