-- 0006: the ComfyUI-compatible front's records beside the jobs it created:
-- the WebSocket session a job reports to, and what its history hides.

CREATE TABLE native_prompts (
    job_id TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL,
    client_id TEXT NOT NULL DEFAULT ''
);
-- ClientJobs: an account's prompts of one WebSocket session.
CREATE INDEX native_prompts_client ON native_prompts (account_id, client_id);

-- Jobs hidden one by one from an account's history (POST /history delete).
CREATE TABLE native_history_hidden (
    account_id TEXT NOT NULL,
    job_id TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    PRIMARY KEY (account_id, job_id)
);

-- An account's last POST /history clear: jobs completed at or before it are hidden.
CREATE TABLE native_history_cleared (
    account_id TEXT PRIMARY KEY,
    cleared_at TEXT NOT NULL
);
