-- 0014: results of a router call's recorded answer whose copy failed (see
-- the postgres migration of the same name). Expand only.
ALTER TABLE router_calls ADD COLUMN rehost_failed INTEGER NOT NULL DEFAULT 0 CHECK (rehost_failed >= 0);
