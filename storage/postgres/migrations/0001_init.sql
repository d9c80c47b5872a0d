-- 0001: blobs with reference counts, assets over them, API keys.
--
-- A blob row exists exactly while some asset references it; refs counts the
-- referencing assets. Creates and deletes of one hash serialize on the blob
-- row's lock, which is what keeps the bytes on disk in step with the rows.

CREATE TABLE blobs (
    hash text PRIMARY KEY,
    size bigint NOT NULL CHECK (size >= 0),
    refs integer NOT NULL CHECK (refs >= 0)
);

CREATE TABLE assets (
    id uuid PRIMARY KEY,
    account_id text NOT NULL,
    hash text NOT NULL REFERENCES blobs (hash),
    size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
    content_type text NOT NULL,
    file_path text NOT NULL,
    tags text[] NOT NULL DEFAULT '{}',
    job_id uuid NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NULL,
    idempotency_key text NULL,
    -- The durable backstop behind the (losable) Redis claim. NULL keys never
    -- conflict, so assets created without a key are unconstrained.
    CONSTRAINT assets_account_idempotency_key UNIQUE (account_id, idempotency_key)
);

-- FindAsset / AccountBlob / AccountHadBlob.
CREATE INDEX assets_account_hash ON assets (account_id, hash, created_at DESC);
-- FindAssetByPath.
CREATE INDEX assets_account_path ON assets (account_id, file_path, created_at DESC);
-- The reaper.
CREATE INDEX assets_expires_at ON assets (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE api_keys (
    id text PRIMARY KEY,
    account_id text NOT NULL,
    name text NOT NULL,
    digest bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz NULL
);

CREATE INDEX api_keys_account ON api_keys (account_id, created_at);
