-- 0005: every account's jobs newest first (ListJobs with no account: the
-- operator console), on an index rather than a sort of the whole table.
CREATE INDEX jobs_created ON jobs (created_at DESC, id DESC);
