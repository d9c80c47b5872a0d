-- 0009: indexes for the foreign-key checks of the reaper's deletes.
--
-- Deleting a blob row checks that no asset still references its hash
-- (assets.hash REFERENCES blobs); without an index led by hash that check
-- read the whole assets table once per blob: at 100,000 assets a sweep of
-- 500 expired outputs took 13 s (TestQueryPlansAtScale). Deleting a job
-- checks native_history_hidden by job_id, which its primary key (account
-- first) cannot serve.
--
-- Plain CREATE INDEX (migrations run in a transaction): it blocks writes
-- to the table while it builds, a few seconds at a million assets.
CREATE INDEX assets_hash ON assets (hash);
CREATE INDEX native_history_hidden_job ON native_history_hidden (job_id);
