-- 0003: model-router usage/audit records and idempotency key claims.
-- Timestamps use the 0001 text layout, so text order is time order.

CREATE TABLE router_calls (
    request_id TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL,
    model_id TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('running', 'answered', 'released', 'collecting', 'consumed')),
    bucket TEXT NOT NULL DEFAULT '',
    http_status INTEGER NOT NULL DEFAULT 0,
    reserved_cents INTEGER NOT NULL DEFAULT 0,
    charged_cents INTEGER NOT NULL DEFAULT 0,
    provider_handle TEXT,
    idempotency_key TEXT,
    fingerprint TEXT NOT NULL DEFAULT '',
    response_status INTEGER NOT NULL DEFAULT 0,
    response_content_type TEXT NOT NULL DEFAULT '',
    response_body BLOB,
    replayable INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    finished_at TEXT,
    key_expires_at TEXT
);
CREATE INDEX router_calls_workspace ON router_calls (workspace_id, created_at);

-- One live claim per (workspace, key). An expired claim is taken over by the
-- next claim of the same key; a released one is deleted.
CREATE TABLE router_keys (
    workspace_id TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    request_id TEXT NOT NULL REFERENCES router_calls (request_id),
    expires_at TEXT NOT NULL,
    PRIMARY KEY (workspace_id, idempotency_key)
);
CREATE INDEX router_keys_expiry ON router_keys (expires_at);
