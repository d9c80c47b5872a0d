package embedded

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.CreditStore = (*Store)(nil)

// Every write of a credit entry adds the same amount to
// credit_accounts.balance in the same write transaction (addEntry), so the
// balance column is always the sum of the account's entries. The single
// writer serializes every change of a balance.

const creditEntryColumns = `seq, account_id, kind, amount, charged, run_ms, coalesce(job_id, ''),
	coalesce(call_id, ''), note, created_at`

func scanCreditEntry(row scanner) (storage.CreditEntry, error) {
	var e storage.CreditEntry
	var created string
	if err := row.Scan(&e.Seq, &e.AccountID, &e.Kind, &e.Amount, &e.Charged, &e.RunMS, &e.JobID, &e.CallID,
		&e.Note, &created); err != nil {
		return e, err
	}
	var err error
	e.CreatedAt, err = parseTime(created)
	return e, err
}

// addEntry appends e (Seq and CreatedAt are set) and adds its amount to the
// account's balance, creating the account's ledger for a positive grant.
// ErrInsufficientCredits when the balance would go below zero.
func addEntry(ctx context.Context, tx *sql.Tx, e *storage.CreditEntry) error {
	e.CreatedAt = now()
	t := formatTime(e.CreatedAt)
	res, err := tx.ExecContext(ctx, `UPDATE credit_accounts SET balance = balance + ?, updated_at = ?
		WHERE account_id = ? AND balance + ? >= 0`, e.Amount, t, e.AccountID, e.Amount)
	if err != nil {
		return fmt.Errorf("embedded: update balance: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM credit_accounts WHERE account_id = ?)`,
			e.AccountID).Scan(&exists); err != nil {
			return fmt.Errorf("embedded: read balance: %w", err)
		}
		if exists || e.Amount < 0 {
			return storage.ErrInsufficientCredits
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO credit_accounts (account_id, balance, updated_at) VALUES (?, ?, ?)`,
			e.AccountID, e.Amount, t); err != nil {
			return fmt.Errorf("embedded: open ledger: %w", err)
		}
	}
	err = tx.QueryRowContext(ctx, `INSERT INTO credit_entries
		(account_id, kind, amount, charged, run_ms, job_id, call_id, note, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`,
		e.AccountID, e.Kind, e.Amount, e.Charged, e.RunMS, nullString(e.JobID), nullString(e.CallID), e.Note, t).Scan(&e.Seq)
	if isUniqueViolation(err) {
		return fmt.Errorf("embedded: credit entry: %w", storage.ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("embedded: credit entry: %w", err)
	}
	return nil
}

func checkAmount(accountID string, amount int64) error {
	if accountID == "" {
		return errors.New("embedded: credits: empty account")
	}
	if amount < -storage.MaxCredits || amount > storage.MaxCredits {
		return fmt.Errorf("embedded: credits: amount %d out of range", amount)
	}
	return nil
}

// GrantCredits implements storage.CreditStore.
func (s *Store) GrantCredits(ctx context.Context, accountID string, amount int64, note string) (storage.CreditEntry, error) {
	if err := checkAmount(accountID, amount); err != nil {
		return storage.CreditEntry{}, err
	}
	if amount == 0 {
		return storage.CreditEntry{}, errors.New("embedded: grant credits: amount must not be zero")
	}
	e := storage.CreditEntry{AccountID: accountID, Kind: storage.CreditGrant, Amount: amount, Note: note}
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		err := addEntry(ctx, tx, &e)
		if !errors.Is(err, storage.ErrInsufficientCredits) {
			return err
		}
		// The balance that refused the debit: read in the same write
		// transaction, so no other change came between.
		var bal int64
		err = tx.QueryRowContext(ctx, `SELECT balance FROM credit_accounts WHERE account_id = ?`, accountID).Scan(&bal)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("embedded: read balance: %w", err)
		}
		return &storage.OverdraftError{AccountID: accountID, Balance: bal, Amount: amount}
	})
	return e, err
}

// CreditBalance implements storage.CreditStore.
func (s *Store) CreditBalance(ctx context.Context, accountID string) (int64, error) {
	var bal int64
	err := s.read.QueryRowContext(ctx, `SELECT balance FROM credit_accounts WHERE account_id = ?`, accountID).Scan(&bal)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("embedded: credit balance: %w", err)
	}
	return bal, nil
}

// CreditLedger implements storage.CreditStore.
func (s *Store) CreditLedger(ctx context.Context, accountID string, since time.Time) ([]storage.CreditEntry, error) {
	rows, err := s.read.QueryContext(ctx, `SELECT `+creditEntryColumns+` FROM credit_entries
		WHERE account_id = ? AND created_at >= ? ORDER BY created_at, seq`, accountID, formatTime(since))
	if err != nil {
		return nil, fmt.Errorf("embedded: credit ledger: %w", err)
	}
	defer rows.Close()
	var out []storage.CreditEntry
	for rows.Next() {
		e, err := scanCreditEntry(rows)
		if err != nil {
			return nil, fmt.Errorf("embedded: credit ledger: %w", err)
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// CreditUsage implements storage.CreditStore. Execution times are summed
// in Go: the stored timestamps are text.
func (s *Store) CreditUsage(ctx context.Context, since time.Time) ([]storage.CreditUsage, error) {
	t := formatTime(since)
	by := map[string]*storage.CreditUsage{}
	get := func(id string) *storage.CreditUsage {
		if by[id] == nil {
			by[id] = &storage.CreditUsage{AccountID: id}
		}
		return by[id]
	}
	rows, err := s.read.QueryContext(ctx, `SELECT account_id, started_at, completed_at FROM jobs WHERE completed_at >= ?`, t)
	if err != nil {
		return nil, fmt.Errorf("embedded: credit usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, completed string
		var started sql.NullString
		if err := rows.Scan(&id, &started, &completed); err != nil {
			return nil, fmt.Errorf("embedded: credit usage: %w", err)
		}
		u := get(id)
		u.Jobs++
		if started.Valid {
			st, err1 := parseTime(started.String)
			end, err2 := parseTime(completed)
			if err := errors.Join(err1, err2); err != nil {
				return nil, err
			}
			u.ExecutionMS += end.Sub(st).Milliseconds()
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("embedded: credit usage: %w", err)
	}
	sums := []struct {
		query string
		into  func(u *storage.CreditUsage, n int64)
	}{
		{`SELECT workspace_id, count(*) FROM router_calls WHERE finished_at >= ? GROUP BY workspace_id`,
			func(u *storage.CreditUsage, n int64) { u.RouterCalls = n }},
		{`SELECT account_id, sum(charged) FROM credit_entries WHERE kind = 'settlement' AND created_at >= ?
			GROUP BY account_id`, func(u *storage.CreditUsage, n int64) { u.Credits = n }},
	}
	for _, q := range sums {
		if err := scanSums(ctx, s.read, q.query, t, func(id string, n int64) { q.into(get(id), n) }); err != nil {
			return nil, err
		}
	}
	out := make([]storage.CreditUsage, 0, len(by))
	for _, u := range by {
		out = append(out, *u)
	}
	slices.SortFunc(out, func(a, b storage.CreditUsage) int { return strings.Compare(a.AccountID, b.AccountID) })
	return out, nil
}

// scanSums runs query (one time parameter) and hands each (id, n) row to fn.
func scanSums(ctx context.Context, q querier, query, t string, fn func(id string, n int64)) error {
	rows, err := q.QueryContext(ctx, query, t)
	if err != nil {
		return fmt.Errorf("embedded: credit usage: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			return fmt.Errorf("embedded: credit usage: %w", err)
		}
		fn(id, n)
	}
	return rows.Err()
}

// ReserveCallCredits implements storage.CreditStore.
func (s *Store) ReserveCallCredits(ctx context.Context, accountID, callID string, amount int64) error {
	if err := checkAmount(accountID, amount); err != nil {
		return err
	}
	if amount <= 0 || callID == "" {
		return errors.New("embedded: reserve call credits: needs a call id and a positive amount")
	}
	return s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var exists bool
		if err := tx.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM credit_accounts WHERE account_id = ?)`,
			accountID).Scan(&exists); err != nil {
			return fmt.Errorf("embedded: reserve call credits: %w", err)
		}
		if !exists {
			return storage.ErrInsufficientCredits
		}
		e := storage.CreditEntry{AccountID: accountID, Kind: storage.CreditReservation, Amount: -amount, CallID: callID}
		if err := addEntry(ctx, tx, &e); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO credit_call_holds (call_id, account_id, amount, created_at)
			VALUES (?, ?, ?, ?)`, callID, accountID, amount, formatTime(e.CreatedAt))
		if isUniqueViolation(err) {
			return storage.ErrDuplicate
		}
		return err
	})
}

// SettleCallCredits implements storage.CreditStore.
func (s *Store) SettleCallCredits(ctx context.Context, callID string, charged int64) (bool, error) {
	if charged < 0 || charged > storage.MaxCredits {
		return false, fmt.Errorf("embedded: settle call credits: charge %d out of range", charged)
	}
	var settled bool
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		var err error
		settled, err = settleHold(ctx, tx, callID, func(int64, string) int64 { return charged })
		return err
	})
	return settled, err
}

// settleHold deletes the call's hold and settles it for charge(amount,
// account) (capped at the amount); false when the call holds none.
func settleHold(ctx context.Context, tx *sql.Tx, callID string, charge func(amount int64, account string) int64) (bool, error) {
	var account string
	var amount int64
	err := tx.QueryRowContext(ctx, `DELETE FROM credit_call_holds WHERE call_id = ? RETURNING account_id, amount`,
		callID).Scan(&account, &amount)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("embedded: settle call credits: %w", err)
	}
	c := min(max(charge(amount, account), 0), amount)
	e := storage.CreditEntry{AccountID: account, Kind: storage.CreditRefund, Amount: amount - c, Charged: c, CallID: callID}
	if c > 0 {
		e.Kind = storage.CreditSettlement
	}
	return true, addEntry(ctx, tx, &e)
}

// SettleStaleCallCredits implements storage.CreditStore.
func (s *Store) SettleStaleCallCredits(ctx context.Context, before time.Time) (int, error) {
	n := 0
	err := s.inWriteTx(ctx, func(tx *sql.Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT h.call_id, CASE WHEN c.state IN ('answered', 'released', 'consumed')
				THEN c.charged_cents ELSE 0 END
			FROM credit_call_holds h LEFT JOIN router_calls c ON c.request_id = h.call_id
			WHERE h.created_at < ? ORDER BY h.created_at LIMIT 1000`, formatTime(before))
		if err != nil {
			return fmt.Errorf("embedded: stale call credits: %w", err)
		}
		type stale struct {
			id      string
			charged int64
		}
		var list []stale
		for rows.Next() {
			var st stale
			var charged sql.NullInt64
			if err := rows.Scan(&st.id, &charged); err != nil {
				rows.Close()
				return err
			}
			st.charged = charged.Int64
			list = append(list, st)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return err
		}
		for _, st := range list {
			ok, err := settleHold(ctx, tx, st.id, func(int64, string) int64 { return st.charged })
			if err != nil {
				return err
			}
			if ok {
				n++
			}
		}
		return nil
	})
	return n, err
}

// settleJob settles job, which the caller's transaction has just moved to
// a terminal state, when it is priced and not yet settled: it records the
// charge on the job, appends the settlement (or refund) entry and gives
// the unused reserve back. fault marks an end through a platform fault.
// It returns the job with its Credits.Charged set.
func settleJob(ctx context.Context, tx *sql.Tx, job storage.Job, fault bool) (storage.Job, error) {
	if job.Credits == nil || job.Credits.Charged != nil || !storage.Terminal(job.Status) {
		return job, nil
	}
	var started sql.NullString
	if err := tx.QueryRowContext(ctx, `SELECT attempt_started_at FROM jobs WHERE id = ?`, job.ID).Scan(&started); err != nil {
		return job, fmt.Errorf("embedded: settle job: %w", err)
	}
	var runMS, charge int64
	if started.Valid && job.CompletedAt != nil {
		st, err := parseTime(started.String)
		if err != nil {
			return job, err
		}
		runMS = max(job.CompletedAt.Sub(st).Milliseconds(), 0)
		if !fault {
			charge = storage.JobCharge(*job.Credits, runMS)
		}
	}
	res, err := tx.ExecContext(ctx, `UPDATE jobs SET charged_credits = ? WHERE id = ? AND charged_credits IS NULL`,
		charge, job.ID)
	if err != nil {
		return job, fmt.Errorf("embedded: settle job: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return job, nil // settled already
	}
	e := storage.CreditEntry{AccountID: job.AccountID, Kind: storage.CreditRefund, Amount: job.Credits.Reserved - charge,
		Charged: charge, RunMS: runMS, JobID: job.ID}
	if charge > 0 {
		e.Kind = storage.CreditSettlement
	}
	if err := addEntry(ctx, tx, &e); err != nil {
		return job, err
	}
	credits := *job.Credits
	credits.Charged = &charge
	job.Credits = &credits
	return job, nil
}
