-- 0008: the credit ledger, job prices and settlement, and fair-share turns.
--
-- An account's balance is the sum of its ledger entries. credit_accounts
-- keeps that sum as a column so that a reservation checks and takes it in
-- one row update (balance >= 0 is the constraint no concurrent reservation
-- can break); every statement that adds an entry adds the same amount to
-- the column, in the same transaction.

CREATE TABLE credit_accounts (
    account_id text PRIMARY KEY,
    balance bigint NOT NULL CHECK (balance >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE credit_entries (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account_id text NOT NULL REFERENCES credit_accounts (account_id),
    kind text NOT NULL CHECK (kind IN ('grant', 'reservation', 'settlement', 'refund')),
    amount bigint NOT NULL,
    -- settlement: what was charged; settlement and refund of a job: how long
    -- its charged attempt ran.
    charged bigint NOT NULL DEFAULT 0 CHECK (charged >= 0),
    run_ms bigint NOT NULL DEFAULT 0 CHECK (run_ms >= 0),
    job_id uuid NULL,
    call_id text NULL,
    note text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    CHECK (job_id IS NULL OR call_id IS NULL),
    CHECK ((kind = 'grant') = (job_id IS NULL AND call_id IS NULL))
);
-- CreditLedger.
CREATE INDEX credit_entries_account ON credit_entries (account_id, created_at, seq);
-- CreditUsage.
CREATE INDEX credit_entries_created ON credit_entries (created_at) WHERE kind = 'settlement';
-- Exactly once: one reservation and one ending (settlement or refund) per
-- job and per call.
CREATE UNIQUE INDEX credit_entries_job_reserved ON credit_entries (job_id) WHERE kind = 'reservation';
CREATE UNIQUE INDEX credit_entries_job_ended ON credit_entries (job_id) WHERE kind IN ('settlement', 'refund');
CREATE UNIQUE INDEX credit_entries_call_reserved ON credit_entries (call_id) WHERE kind = 'reservation';
CREATE UNIQUE INDEX credit_entries_call_ended ON credit_entries (call_id) WHERE kind IN ('settlement', 'refund');

-- Open reservations of router calls: a row from the reservation until the
-- settlement, which deletes it (so only one settlement can find it).
CREATE TABLE credit_call_holds (
    call_id text PRIMARY KEY,
    account_id text NOT NULL REFERENCES credit_accounts (account_id),
    amount bigint NOT NULL CHECK (amount > 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_call_holds_created ON credit_call_holds (created_at);

-- A priced job carries its price and reservation; charged_credits is set
-- in the statement that moves it to a terminal state. attempt_started_at
-- is when the current attempt was claimed (NULL while queued): the charge
-- counts that attempt's time only.
ALTER TABLE jobs
    ADD COLUMN turn bigint NOT NULL DEFAULT 0,
    ADD COLUMN attempt_started_at timestamptz NULL,
    ADD COLUMN price_per_job bigint NULL,
    ADD COLUMN price_per_second bigint NULL,
    ADD COLUMN reserved_credits bigint NULL,
    ADD COLUMN charged_credits bigint NULL;

-- ClaimJob and QueuePosition: a pool's queue in claim order (see the
-- storage package's fair-share note). Replaces jobs_queue.
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
-- An account's running jobs in a pool (accountMaxRunning).
CREATE INDEX jobs_account_running ON jobs (pool, account_id) WHERE status IN ('running', 'canceling');
