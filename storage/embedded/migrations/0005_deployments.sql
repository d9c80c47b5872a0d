-- 0005: serverless deployments, the deployment of jobs and assets, and
-- jobs' run logs. ADD COLUMN with no default rewrites nothing, so this is
-- safe on a populated file.

CREATE TABLE deployments (
    id TEXT PRIMARY KEY,   -- a DNS label; the store checks it before it writes
    account_id TEXT NOT NULL,
    pool TEXT NOT NULL,
    public INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('provisioning', 'starting', 'ready', 'stopped')),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);

CREATE INDEX deployments_account ON deployments (account_id, created_at);

-- No foreign key: a deployment may be deleted while its jobs and assets
-- wait for their retention.
ALTER TABLE jobs ADD COLUMN deployment_id TEXT;
ALTER TABLE assets ADD COLUMN deployment_id TEXT;

-- A deployment's listing (newest first) and CancelDeploymentJobs.
CREATE INDEX jobs_deployment_created ON jobs (deployment_id, created_at DESC, id DESC)
    WHERE deployment_id IS NOT NULL;

-- DeleteExpiredJobs: terminal jobs by retention deadline.
CREATE INDEX jobs_terminal_expires ON jobs (expires_at)
    WHERE status IN ('succeeded', 'failed', 'canceled', 'expired');

-- One run log per job, written when an attempt ends; it goes with the job.
CREATE TABLE job_logs (
    job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    text TEXT NOT NULL,
    truncated INTEGER NOT NULL,
    captured_at TEXT NOT NULL
);
