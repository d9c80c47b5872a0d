-- 0003: model-router usage/audit records and idempotency key claims.

CREATE TABLE router_calls (
    request_id text PRIMARY KEY,
    workspace_id text NOT NULL,
    model_id text NOT NULL,
    state text NOT NULL CHECK (state IN ('running', 'answered', 'released', 'collecting', 'consumed')),
    bucket text NOT NULL DEFAULT '',
    http_status integer NOT NULL DEFAULT 0,
    reserved_cents bigint NOT NULL DEFAULT 0,
    charged_cents bigint NOT NULL DEFAULT 0,
    provider_handle jsonb,
    idempotency_key text,
    fingerprint text NOT NULL DEFAULT '',
    response_status integer NOT NULL DEFAULT 0,
    response_content_type text NOT NULL DEFAULT '',
    response_body bytea,
    replayable boolean NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    key_expires_at timestamptz
);
CREATE INDEX router_calls_workspace ON router_calls (workspace_id, created_at);

-- One live claim per (workspace, key). An expired claim is taken over by the
-- next claim of the same key; a released one is deleted.
CREATE TABLE router_keys (
    workspace_id text NOT NULL,
    idempotency_key text NOT NULL,
    request_id text NOT NULL REFERENCES router_calls (request_id),
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, idempotency_key)
);
CREATE INDEX router_keys_expiry ON router_keys (expires_at);
