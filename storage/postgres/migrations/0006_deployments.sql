-- 0006: serverless deployments, the deployment of jobs and assets, and
-- jobs' run logs.
--
-- Safe on a populated database: the new columns are nullable without a
-- default (a catalog change, no table rewrite), and the new index only
-- covers rows with a deployment, which no existing row has.

CREATE TABLE deployments (
    -- A DNS label; the application checks the same rule before it writes.
    id text PRIMARY KEY CHECK (id ~ '^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$'),
    account_id text NOT NULL,
    pool text NOT NULL,
    public boolean NOT NULL DEFAULT false,
    state text NOT NULL CHECK (state IN ('provisioning', 'starting', 'ready', 'stopped')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX deployments_account ON deployments (account_id, created_at);

-- No foreign key: a deployment may be deleted while its jobs and assets
-- wait for their retention.
ALTER TABLE jobs ADD COLUMN deployment_id text NULL;
ALTER TABLE assets ADD COLUMN deployment_id text NULL;

-- A deployment's listing (newest first) and CancelDeploymentJobs.
CREATE INDEX jobs_deployment_created ON jobs (deployment_id, created_at DESC, id DESC)
    WHERE deployment_id IS NOT NULL;

-- DeleteExpiredJobs: terminal jobs by retention deadline.
CREATE INDEX jobs_terminal_expires ON jobs (expires_at)
    WHERE status IN ('succeeded', 'failed', 'canceled', 'expired');

-- One run log per job, written when an attempt ends; it goes with the job.
CREATE TABLE job_logs (
    job_id uuid PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    text text NOT NULL,
    truncated boolean NOT NULL,
    captured_at timestamptz NOT NULL
);
