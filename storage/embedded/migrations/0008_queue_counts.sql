-- 0008: each pool's count of queued jobs, kept by triggers, so that the
-- pool's bound (MaxQueued) and a deep job's queue position read one row
-- instead of counting the queue. SQLite has one writer, so one row per pool
-- costs no contention; row triggers run in the writing transaction.

CREATE TABLE queue_counts (
    pool TEXT PRIMARY KEY,
    n INTEGER NOT NULL
);

CREATE TRIGGER jobs_queue_counts_insert AFTER INSERT ON jobs
WHEN NEW.status = 'queued'
BEGIN
    INSERT INTO queue_counts (pool, n) VALUES (NEW.pool, 1)
    ON CONFLICT (pool) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER jobs_queue_counts_delete AFTER DELETE ON jobs
WHEN OLD.status = 'queued'
BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE pool = OLD.pool;
END;

CREATE TRIGGER jobs_queue_counts_leave AFTER UPDATE OF status, pool ON jobs
WHEN OLD.status = 'queued' AND (NEW.status <> 'queued' OR NEW.pool <> OLD.pool)
BEGIN
    UPDATE queue_counts SET n = n - 1 WHERE pool = OLD.pool;
END;

CREATE TRIGGER jobs_queue_counts_enter AFTER UPDATE OF status, pool ON jobs
WHEN NEW.status = 'queued' AND (OLD.status <> 'queued' OR NEW.pool <> OLD.pool)
BEGIN
    INSERT INTO queue_counts (pool, n) VALUES (NEW.pool, 1)
    ON CONFLICT (pool) DO UPDATE SET n = n + 1;
END;

INSERT INTO queue_counts (pool, n)
SELECT pool, count(*) FROM jobs WHERE status = 'queued' GROUP BY pool;
