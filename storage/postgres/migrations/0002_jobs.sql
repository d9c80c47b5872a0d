-- 0002: jobs, their queue and leases, and the outputs each attempt commits.
--
-- workflow, progress and error are json, not jsonb: json keeps the submitted
-- text byte for byte (key order, spacing, duplicate keys), which is what
-- clients get back.

CREATE TABLE jobs (
    id uuid PRIMARY KEY,
    account_id text NOT NULL,
    pool text NOT NULL,
    status text NOT NULL CHECK (status IN
        ('queued', 'running', 'canceling', 'succeeded', 'failed', 'canceled', 'expired')),
    workflow json NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz NULL,
    completed_at timestamptz NULL,
    expires_at timestamptz NOT NULL,
    progress json NULL,
    error json NULL,
    attempt integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    lease_owner text NULL,
    -- Set from the database clock (now()), so workers whose clocks disagree
    -- still agree on who holds a lease.
    lease_expires_at timestamptz NULL,
    idempotency_key text NULL,
    CONSTRAINT jobs_account_idempotency_key UNIQUE (account_id, idempotency_key)
);

-- ListJobs: an account's jobs newest first.
CREATE INDEX jobs_account_created ON jobs (account_id, created_at DESC, id DESC);
-- ClaimJob, QueuePosition and the MaxQueued count: a pool's queue, oldest first.
CREATE INDEX jobs_queue ON jobs (pool, created_at, id) WHERE status = 'queued';
-- ReclaimExpired.
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status IN ('running', 'canceling');
-- ExpireJobs.
CREATE INDEX jobs_expires ON jobs (expires_at) WHERE status IN ('queued', 'running', 'canceling');

-- ExpireJobs' running bound.
CREATE INDEX jobs_running_started ON jobs (started_at) WHERE status = 'running';

-- One row per output an attempt committed. The asset cannot be deleted while
-- the row exists (RESTRICT); DeleteAsset drops rows of expired jobs itself and
-- refuses the rest with ErrInUse.
CREATE TABLE job_outputs (
    job_id uuid NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt integer NOT NULL,
    seq integer NOT NULL,
    node_id text NOT NULL,
    name text NOT NULL,
    type text NOT NULL,
    asset_id uuid NOT NULL REFERENCES assets (id) ON DELETE RESTRICT,
    PRIMARY KEY (job_id, seq)
);

CREATE INDEX job_outputs_asset ON job_outputs (asset_id);
