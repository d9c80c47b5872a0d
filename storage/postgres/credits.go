package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/comfygate/comfygate/storage"
)

var _ storage.CreditStore = (*Store)(nil)

// Every statement that writes a credit entry adds the same amount to
// credit_accounts.balance in the same transaction, so the balance column is
// always the sum of the account's entries; balance >= 0 is its constraint.
// Statements that touch several accounts lock their rows in account order
// (ORDER BY … FOR UPDATE) so that two of them cannot deadlock.

const creditEntryColumns = `seq, account_id, kind, amount, charged, run_ms, coalesce(job_id::text, ''),
	coalesce(call_id, ''), note, created_at`

func scanCreditEntry(row pgx.Row) (storage.CreditEntry, error) {
	var e storage.CreditEntry
	err := row.Scan(&e.Seq, &e.AccountID, &e.Kind, &e.Amount, &e.Charged, &e.RunMS, &e.JobID, &e.CallID,
		&e.Note, &e.CreatedAt)
	e.CreatedAt = e.CreatedAt.UTC()
	return e, err
}

// checkCredits refuses an account id or amount a ledger cannot hold.
func checkCredits(op, accountID string, amount int64) error {
	if accountID == "" {
		return fmt.Errorf("postgres: %s: empty account", op)
	}
	if amount < -storage.MaxCredits || amount > storage.MaxCredits {
		return fmt.Errorf("postgres: %s: amount %d out of range", op, amount)
	}
	return nil
}

// GrantCredits appends a grant and adds it to the balance in one statement;
// the account's ledger is created by its first grant.
func (s *Store) GrantCredits(ctx context.Context, accountID string, amount int64, note string) (storage.CreditEntry, error) {
	if err := checkCredits("grant credits", accountID, amount); err != nil {
		return storage.CreditEntry{}, err
	}
	if amount == 0 {
		return storage.CreditEntry{}, errors.New("postgres: grant credits: amount must not be zero")
	}
	// A positive grant opens the account's ledger when needed; a negative
	// one needs a ledger with enough in it.
	acct := `INSERT INTO credit_accounts AS a (account_id, balance) VALUES ($1, $2)
		ON CONFLICT (account_id) DO UPDATE SET balance = a.balance + $2, updated_at = now()
		RETURNING account_id`
	if amount < 0 {
		acct = `UPDATE credit_accounts SET balance = balance + $2, updated_at = now()
		WHERE account_id = $1 AND balance + $2 >= 0 RETURNING account_id`
	}
	e, err := scanCreditEntry(s.pool.QueryRow(ctx, `WITH acct AS (`+acct+`)
		INSERT INTO credit_entries (account_id, kind, amount, note)
		SELECT account_id, 'grant', $2, $3 FROM acct
		RETURNING `+creditEntryColumns, accountID, amount, note))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// The balance is read after the refusal, for the message: a
		// change committed in between would show here.
		bal, err := s.CreditBalance(ctx, accountID)
		if err != nil {
			return storage.CreditEntry{}, err
		}
		return storage.CreditEntry{}, &storage.OverdraftError{AccountID: accountID, Balance: bal, Amount: amount}
	case err != nil:
		return storage.CreditEntry{}, mapErr("grant credits", err)
	}
	return e, nil
}

// CreditBalance returns the account's balance (0 without a ledger).
func (s *Store) CreditBalance(ctx context.Context, accountID string) (int64, error) {
	var bal int64
	err := s.pool.QueryRow(ctx, `SELECT balance FROM credit_accounts WHERE account_id = $1`, accountID).Scan(&bal)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, mapErr("credit balance", err)
	}
	return bal, nil
}

// CreditLedger returns the account's entries since the given time, oldest first.
func (s *Store) CreditLedger(ctx context.Context, accountID string, since time.Time) ([]storage.CreditEntry, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+creditEntryColumns+` FROM credit_entries
		WHERE account_id = $1 AND created_at >= $2 ORDER BY created_at, seq`, accountID, since)
	if err != nil {
		return nil, mapErr("credit ledger", err)
	}
	defer rows.Close()
	var out []storage.CreditEntry
	for rows.Next() {
		e, err := scanCreditEntry(rows)
		if err != nil {
			return nil, mapErr("credit ledger", err)
		}
		out = append(out, e)
	}
	return out, mapErr("credit ledger", rows.Err())
}

// CreditUsage sums jobs, router calls and charges per account since the
// given time, from the jobs, router_calls and credit_entries tables.
func (s *Store) CreditUsage(ctx context.Context, since time.Time) ([]storage.CreditUsage, error) {
	rows, err := s.pool.Query(ctx, `WITH j AS (
			SELECT account_id, count(*) AS jobs, coalesce(sum(CASE WHEN started_at IS NULL THEN 0
				ELSE floor(extract(epoch FROM completed_at - started_at) * 1000) END), 0)::bigint AS ms
			FROM jobs WHERE completed_at >= $1 GROUP BY account_id),
		c AS (SELECT workspace_id AS account_id, count(*) AS calls FROM router_calls
			WHERE finished_at >= $1 GROUP BY workspace_id),
		e AS (SELECT account_id, sum(charged)::bigint AS credits FROM credit_entries
			WHERE kind = 'settlement' AND created_at >= $1 GROUP BY account_id)
		SELECT account_id, coalesce(j.jobs, 0), coalesce(j.ms, 0), coalesce(c.calls, 0), coalesce(e.credits, 0)
		FROM j FULL JOIN c USING (account_id) FULL JOIN e USING (account_id)
		ORDER BY account_id`, since)
	if err != nil {
		return nil, mapErr("credit usage", err)
	}
	defer rows.Close()
	var out []storage.CreditUsage
	for rows.Next() {
		var u storage.CreditUsage
		if err := rows.Scan(&u.AccountID, &u.Jobs, &u.ExecutionMS, &u.RouterCalls, &u.Credits); err != nil {
			return nil, mapErr("credit usage", err)
		}
		out = append(out, u)
	}
	return out, mapErr("credit usage", rows.Err())
}

// ReserveCallCredits takes amount from the balance, records the
// reservation and opens the call's hold, in one statement.
func (s *Store) ReserveCallCredits(ctx context.Context, accountID, callID string, amount int64) error {
	if err := checkCredits("reserve call credits", accountID, amount); err != nil {
		return err
	}
	if amount <= 0 || callID == "" {
		return errors.New("postgres: reserve call credits: needs a call id and a positive amount")
	}
	var ok bool
	err := s.pool.QueryRow(ctx, `WITH paid AS (
			UPDATE credit_accounts SET balance = balance - $3, updated_at = now()
			WHERE account_id = $1 AND balance >= $3 RETURNING account_id),
		hold AS (INSERT INTO credit_call_holds (call_id, account_id, amount)
			SELECT $2, account_id, $3 FROM paid RETURNING call_id),
		entry AS (INSERT INTO credit_entries (account_id, kind, amount, call_id)
			SELECT account_id, 'reservation', -$3, $2 FROM paid)
		SELECT EXISTS (SELECT 1 FROM hold)`, accountID, callID, amount).Scan(&ok)
	if err != nil {
		return mapErr("reserve call credits", err)
	}
	if !ok {
		return storage.ErrInsufficientCredits
	}
	return nil
}

// settleHoldsSQL ends the holds in the CTE named holds (deleted rows with
// call_id, account_id, amount and charged, the charge capped at amount):
// one entry each, and the balances given back in account order.
const settleHoldsSQL = `,
	locked AS MATERIALIZED (SELECT account_id FROM credit_accounts WHERE account_id IN (SELECT account_id FROM holds)
		ORDER BY account_id FOR NO KEY UPDATE),
	entries AS (INSERT INTO credit_entries (account_id, kind, amount, charged, call_id)
		SELECT account_id, CASE WHEN charged > 0 THEN 'settlement' ELSE 'refund' END, amount - charged, charged, call_id
		FROM holds),
	back AS (UPDATE credit_accounts a SET balance = a.balance + d.back, updated_at = now()
		FROM (SELECT account_id, sum(amount - charged) AS back FROM holds GROUP BY account_id) d
		WHERE a.account_id = d.account_id AND a.account_id IN (SELECT account_id FROM locked))
	SELECT count(*) FROM holds`

// SettleCallCredits deletes the call's hold and settles it in the same
// statement; a call without a hold settles nothing.
func (s *Store) SettleCallCredits(ctx context.Context, callID string, charged int64) (bool, error) {
	if charged < 0 || charged > storage.MaxCredits {
		return false, fmt.Errorf("postgres: settle call credits: charge %d out of range", charged)
	}
	var n int
	err := s.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM credit_call_holds WHERE call_id = $1
			RETURNING call_id, account_id, amount),
		holds AS (SELECT call_id, account_id, amount, least($2::bigint, amount) AS charged FROM gone)`+
		settleHoldsSQL, callID, charged).Scan(&n)
	if err != nil {
		return false, mapErr("settle call credits", err)
	}
	return n > 0, nil
}

// SettleStaleCallCredits settles the holds older than before: a call whose
// record finished is charged its recorded charge, any other is refunded.
func (s *Store) SettleStaleCallCredits(ctx context.Context, before time.Time) (int, error) {
	var n int
	err := s.pool.QueryRow(ctx, `WITH gone AS (DELETE FROM credit_call_holds WHERE call_id IN (
				SELECT call_id FROM credit_call_holds WHERE created_at < $1 ORDER BY created_at LIMIT 1000
				FOR UPDATE SKIP LOCKED)
			RETURNING call_id, account_id, amount),
		holds AS (SELECT g.call_id, g.account_id, g.amount, least(g.amount, CASE WHEN c.state IN
				('answered', 'released', 'consumed') THEN c.charged_cents ELSE 0 END) AS charged
			FROM gone g LEFT JOIN router_calls c ON c.request_id = g.call_id)`+settleHoldsSQL, before).Scan(&n)
	if err != nil {
		return 0, mapErr("settle stale call credits", err)
	}
	return n, nil
}
