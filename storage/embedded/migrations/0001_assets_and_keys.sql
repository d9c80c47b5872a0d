-- 0001: blobs with reference counts, assets over them, and API keys.
-- Timestamps are TEXT in fixed-width UTC RFC 3339 with microseconds
-- ("2006-01-02T15:04:05.000000Z"), so text order is time order.

CREATE TABLE blobs (
    hash TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    -- refs counts the assets over this blob; the row is deleted (and the
    -- bytes removed) in the transaction that takes it to zero.
    refs INTEGER NOT NULL CHECK (refs >= 0)
);

CREATE TABLE assets (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    hash TEXT NOT NULL REFERENCES blobs (hash),
    size_bytes INTEGER NOT NULL,
    content_type TEXT NOT NULL,
    file_path TEXT NOT NULL,
    tags TEXT NOT NULL DEFAULT '[]', -- JSON array of strings
    job_id TEXT,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    idempotency_key TEXT, -- NULL when absent; NULLs never collide
    UNIQUE (account_id, idempotency_key)
);

CREATE INDEX assets_account_hash ON assets (account_id, hash, file_path);
CREATE INDEX assets_account_path ON assets (account_id, file_path, created_at);
CREATE INDEX assets_hash ON assets (hash);
CREATE INDEX assets_expires ON assets (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL,
    name TEXT NOT NULL,
    digest BLOB NOT NULL,
    created_at TEXT NOT NULL,
    revoked_at TEXT
);

CREATE INDEX api_keys_account ON api_keys (account_id, created_at);
