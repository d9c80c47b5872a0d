-- 0007: the credit ledger, job prices and settlement, and fair-share turns.
-- Timestamps use the 0001 text layout, so text order is time order.
--
-- An account's balance is the sum of its ledger entries; credit_accounts
-- keeps that sum as a column, changed in the same write transaction as
-- every entry (the single writer serializes them).

CREATE TABLE credit_accounts (
    account_id TEXT PRIMARY KEY,
    balance INTEGER NOT NULL CHECK (balance >= 0),
    updated_at TEXT NOT NULL
);

CREATE TABLE credit_entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    account_id TEXT NOT NULL REFERENCES credit_accounts (account_id),
    kind TEXT NOT NULL CHECK (kind IN ('grant', 'reservation', 'settlement', 'refund')),
    amount INTEGER NOT NULL,
    charged INTEGER NOT NULL DEFAULT 0 CHECK (charged >= 0),
    run_ms INTEGER NOT NULL DEFAULT 0 CHECK (run_ms >= 0),
    job_id TEXT,
    call_id TEXT,
    note TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    CHECK (job_id IS NULL OR call_id IS NULL),
    CHECK ((kind = 'grant') = (job_id IS NULL AND call_id IS NULL))
);
CREATE INDEX credit_entries_account ON credit_entries (account_id, created_at, seq);
CREATE INDEX credit_entries_created ON credit_entries (created_at) WHERE kind = 'settlement';
-- Exactly once: one reservation and one ending per job and per call.
CREATE UNIQUE INDEX credit_entries_job_reserved ON credit_entries (job_id) WHERE kind = 'reservation';
CREATE UNIQUE INDEX credit_entries_job_ended ON credit_entries (job_id) WHERE kind IN ('settlement', 'refund');
CREATE UNIQUE INDEX credit_entries_call_reserved ON credit_entries (call_id) WHERE kind = 'reservation';
CREATE UNIQUE INDEX credit_entries_call_ended ON credit_entries (call_id) WHERE kind IN ('settlement', 'refund');

-- Open reservations of router calls, deleted by their settlement.
CREATE TABLE credit_call_holds (
    call_id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES credit_accounts (account_id),
    amount INTEGER NOT NULL CHECK (amount > 0),
    created_at TEXT NOT NULL
);
CREATE INDEX credit_call_holds_created ON credit_call_holds (created_at);

-- A priced job's price, reservation and (once settled) charge; the turn
-- that orders the queue fairly; when its current attempt was claimed.
ALTER TABLE jobs ADD COLUMN turn INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN attempt_started_at TEXT;
ALTER TABLE jobs ADD COLUMN price_per_job INTEGER;
ALTER TABLE jobs ADD COLUMN price_per_second INTEGER;
ALTER TABLE jobs ADD COLUMN reserved_credits INTEGER;
ALTER TABLE jobs ADD COLUMN charged_credits INTEGER;

-- ClaimJob and QueuePosition: a pool's queue in claim order. Replaces jobs_queue.
CREATE INDEX jobs_turns ON jobs (pool, turn, created_at, id) WHERE status = 'queued';
DROP INDEX jobs_queue;
-- An account's queue in a pool: its last turn, its queued count
-- (AccountMaxQueued), and the accounts with queued work. The account leads,
-- and the predicate names it (account_id is never NULL), so that only a
-- query about an account can use this index: a query of a whole pool's
-- queue must take jobs_turns. (With stale statistics the planner was seen
-- reading every queued job on this index to find a pool's first.)
CREATE INDEX jobs_account_turns ON jobs (account_id, pool, turn)
    WHERE status = 'queued' AND account_id IS NOT NULL;
-- An account's running jobs in a pool.
CREATE INDEX jobs_account_running ON jobs (pool, account_id) WHERE status IN ('running', 'canceling');
