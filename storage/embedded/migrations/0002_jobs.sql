-- 0002: jobs, their queue and leases, and the outputs each attempt commits.
-- Timestamps use the 0001 text layout, so text order is time order.

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    pool TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN
        ('queued', 'running', 'canceling', 'succeeded', 'failed', 'canceled', 'expired')),
    workflow TEXT NOT NULL,  -- the submitted graph, byte for byte
    created_at TEXT NOT NULL,
    started_at TEXT,
    completed_at TEXT,
    expires_at TEXT NOT NULL,
    progress TEXT,           -- JSON object, NULL until known
    error TEXT,              -- JSON object, NULL unless failed
    attempt INTEGER NOT NULL DEFAULT 0,
    lease_owner TEXT,
    lease_expires_at TEXT,
    idempotency_key TEXT,    -- NULL when absent; NULLs never collide
    UNIQUE (account_id, idempotency_key)
);

-- ListJobs: an account's jobs newest first.
CREATE INDEX jobs_account_created ON jobs (account_id, created_at DESC, id DESC);
-- ClaimJob, QueuePosition and the MaxQueued count: a pool's queue, oldest first.
CREATE INDEX jobs_queue ON jobs (pool, created_at, id) WHERE status = 'queued';
-- ReclaimExpired.
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status IN ('running', 'canceling');
-- ExpireJobs.
CREATE INDEX jobs_expires ON jobs (expires_at)
    WHERE status IN ('queued', 'running', 'canceling');

-- ExpireJobs' running bound.
CREATE INDEX jobs_running_started ON jobs (started_at) WHERE status = 'running';

-- One row per output an attempt committed. The asset cannot be deleted while
-- the row exists (RESTRICT); DeleteAsset drops rows of expired jobs itself and
-- refuses the rest with ErrInUse.
CREATE TABLE job_outputs (
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    attempt INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    node_id TEXT NOT NULL,
    name TEXT NOT NULL,
    type TEXT NOT NULL,
    asset_id TEXT NOT NULL REFERENCES assets (id) ON DELETE RESTRICT,
    PRIMARY KEY (job_id, seq)
);

CREATE INDEX job_outputs_asset ON job_outputs (asset_id);
