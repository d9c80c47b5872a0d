-- 0009: an index for a foreign-key check of the reaper's deletes: a job's
-- delete looks for its hidden-history rows by job_id, which the table's
-- primary key (account first) cannot serve, so each deleted job scanned the
-- table. (assets_hash, the blob delete's check, exists since 0001.)
CREATE INDEX native_history_hidden_job ON native_history_hidden (job_id);
