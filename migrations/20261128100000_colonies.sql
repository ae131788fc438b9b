-- Issue 13 (item 4): colonies you can follow.
--
-- A named colony is known only by its key: "ck_" + the first 32 hex digits of HMAC-SHA256(the tenant's
-- colony secret, the colony's name), computed on the device (apiary_schema::colony). Names never reach
-- this database.

-- One secret per tenant, 32 random bytes, created on first use (GET /v1/whoami with an ingest token) and
-- never changed: a new secret would give every colony of the tenant a new key.
CREATE TABLE colony_secrets (
    tenant_id   uuid        PRIMARY KEY REFERENCES tenants (tenant_id),
    secret      bytea       NOT NULL CHECK (length(secret) = 32),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- A colony run: the session a colony.created event with a colony key names as the colony's (Hive's fork
-- of the queen session into the colony: `forked_session_id`, else `queen_session_id`, else the event's own
-- session). Its workers are the sessions whose colony_id (or parent) is that session. When two events name
-- the same session for two colonies, the earliest (effective time, then event id) wins, whatever the
-- order of arrival.
CREATE TABLE colony_runs (
    tenant_id          uuid        NOT NULL,
    session_id         text        NOT NULL,
    colony_key         text        NOT NULL CHECK (colony_key ~ '^(ck|dk)_[0-9a-f]{32}$'),
    -- the session that created or loaded the colony (the queen), when it is not the run itself
    parent_session_id  text,
    -- the owner of the event that named the run (a user-bound read sees only its own colonies' runs)
    user_id            text        NOT NULL DEFAULT '',
    created_at         timestamptz NOT NULL,
    event_id           uuid        NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX colony_runs_key ON colony_runs (tenant_id, colony_key);

-- Forked sessions (Hive's session_forked, and a colony's fork of its queen): the child's parent in the
-- session tree. The earliest fork event wins.
CREATE TABLE session_forks (
    tenant_id          uuid        NOT NULL,
    session_id         text        NOT NULL,
    parent_session_id  text        NOT NULL,
    forked_at          timestamptz NOT NULL,
    event_id           uuid        NOT NULL,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX session_forks_parent ON session_forks (tenant_id, parent_session_id);

-- Display labels, set by a tenant's admin (PUT /v1/colonies/{key}/label); stored only here.
CREATE TABLE colony_labels (
    tenant_id   uuid        NOT NULL,
    colony_key  text        NOT NULL,
    label       text        NOT NULL CHECK (length(label) BETWEEN 1 AND 100),
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, colony_key)
);
