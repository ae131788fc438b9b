-- Operator tokens: the one credential that reads across tenants (GET /v1/usage grouped by tenant, and
-- by model; never a tenant's users, sessions, colonies or devices). They live in a table of their own,
-- apart from `api_tokens`, so no scope, column value or mistake in a tenant's token can ever grant the
-- cross-tenant view: only `apiary-ingest operator-token create` writes here. Stored as the SHA-256 of
-- the token, like tenant tokens; revoked by `apiary-ingest token revoke` like them.
CREATE TABLE operator_tokens (
    token_hash  bytea       PRIMARY KEY,
    token_id    uuid        NOT NULL UNIQUE,
    -- what the token is for (e.g. "billing"), for audit
    label       text        NOT NULL CHECK (length(label) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
