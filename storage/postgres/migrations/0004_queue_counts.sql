-- 0004: per-pool counts of queued jobs, so CreateJob checks max_queued in
-- O(1) instead of counting the queue on every submission.
--
-- A pool's count is spread over up to 64 shard rows; the true count is
-- their sum. Writers add their delta to a random shard, so concurrent
-- submissions only wait for each other (on the shard row's lock, held to
-- commit) when they pick the same shard, and group commit keeps working.
-- 64 shards, not fewer: with 16 submissions in flight a new one shares a
-- shard with another (and waits out its commit) ~21 % of the time at 64,
-- ~62 % at 16; summing 64 small rows costs next to nothing.
-- A shard's n may be negative (a job counted in one shard leaves through
-- another); only the sum means anything.
--
-- Statement-level triggers keep the counts, not row-level ones: a statement
-- that moves many jobs (ExpireJobs, ReclaimExpired, a bulk delete) then
-- takes one shard row per pool, in pool order. Row-level triggers would
-- lock a random shard per row in row order, and two reapers running at
-- once could deadlock on each other's shards. The price is that every
-- UPDATE of jobs (progress, lease renewals too) runs the trigger once; it
-- reads the statement's changed rows and writes nothing unless a job
-- entered or left 'queued' (or changed pool while queued).
--
-- TRUNCATE fires no INSERT/UPDATE/DELETE trigger; its own trigger clears
-- the counts.

-- Writers wait here until the backfill below commits, so no job can change
-- between the count and the triggers taking over.
LOCK TABLE jobs IN SHARE ROW EXCLUSIVE MODE;

CREATE TABLE queue_counts (
    pool text NOT NULL,
    shard integer NOT NULL CHECK (shard >= 0 AND shard < 64),
    n bigint NOT NULL,
    PRIMARY KEY (pool, shard)
);

-- queue_counts_apply adds, per pool, (jobs entering 'queued') - (jobs
-- leaving it) in the triggering statement to one random shard of the pool.
-- Rows go in pool order so that concurrent statements lock shard rows in
-- one global order. TG_OP tells which transition tables exist.
CREATE FUNCTION queue_counts_apply() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO queue_counts AS c (pool, shard, n)
        SELECT pool, floor(random() * 64)::integer, count(*)
        FROM new_jobs WHERE status = 'queued'
        GROUP BY pool ORDER BY pool
        ON CONFLICT (pool, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO queue_counts AS c (pool, shard, n)
        SELECT pool, floor(random() * 64)::integer, -count(*)
        FROM old_jobs WHERE status = 'queued'
        GROUP BY pool ORDER BY pool
        ON CONFLICT (pool, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'UPDATE' THEN
        INSERT INTO queue_counts AS c (pool, shard, n)
        SELECT pool, floor(random() * 64)::integer, sum(delta)
        FROM (SELECT pool, 1 AS delta FROM new_jobs WHERE status = 'queued'
              UNION ALL
              SELECT pool, -1 FROM old_jobs WHERE status = 'queued') AS moved
        GROUP BY pool HAVING sum(delta) <> 0 ORDER BY pool
        ON CONFLICT (pool, shard) DO UPDATE SET n = c.n + EXCLUDED.n;
    ELSIF TG_OP = 'TRUNCATE' THEN
        DELETE FROM queue_counts;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();
-- No "UPDATE OF status": Postgres refuses column lists on triggers with
-- transition tables, and a change of pool must be counted as well.
CREATE TRIGGER jobs_queue_counts_update AFTER UPDATE ON jobs
    REFERENCING OLD TABLE AS old_jobs NEW TABLE AS new_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();
CREATE TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS old_jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();
CREATE TRIGGER jobs_queue_counts_truncate AFTER TRUNCATE ON jobs
    FOR EACH STATEMENT EXECUTE FUNCTION queue_counts_apply();

INSERT INTO queue_counts (pool, shard, n)
SELECT pool, 0, count(*) FROM jobs WHERE status = 'queued' GROUP BY pool;
