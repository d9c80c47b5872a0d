-- 0012: each pool's scale state, shared by the gateways of one database so
-- that every one of them publishes the same scale signal: when a request
-- last found the pool without a worker (demand the queue does not show),
-- when the unmet demand began and the cold start last measured (that
-- moment to the first healthy worker), and the scale-down hold (the
-- highest desired count recently published and when). Times are Unix
-- milliseconds.
--
-- Expand only: a new table the previous release never reads.
CREATE TABLE pool_scale (
    pool TEXT PRIMARY KEY,
    demand_at INTEGER NOT NULL DEFAULT 0,
    demand_since INTEGER NOT NULL DEFAULT 0,
    cold_start_ms INTEGER NOT NULL DEFAULT 0,
    peak INTEGER NOT NULL DEFAULT 0,
    peak_at INTEGER NOT NULL DEFAULT 0
);
