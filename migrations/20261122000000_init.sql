-- Apiary ingest schema, version 1. Never edit once landed: add a new migration instead.
--
-- Keys: every unique key and every rollup key of the tenant data starts with tenant_id, so the tables can be
-- distributed by tenant_id with Citus (`api_tokens` and `tenants` are small reference tables).
--
-- Dedup and the partition-key trap: `events` is partitioned by time, and a partitioned table's unique key must
-- contain the partition column. The time of an event is not stable across deliveries (clock correction uses
-- `sent_at`; a producer's zone can resolve a naive time differently after a config change), so a unique key
-- on (tenant_id, event_id, <time>) would let a redelivery through and double count. Dedup therefore lives in
-- `event_keys`, an UNPARTITIONED table keyed (tenant_id, event_id) and nothing else. The ingest inserts the
-- batch's keys there first (ON CONFLICT DO NOTHING RETURNING event_id); only the returned (new) ids are
-- written to `events` and fed to the rollups and session state, in the same transaction.
--
-- Retention drops whole `events` partitions (apiary_drop_event_partitions). The matching `event_keys` rows
-- are deleted by time; that is safe because the ingest refuses events older than the retention window, so
-- a key can only be forgotten once its event could no longer be accepted anyway.

CREATE TABLE tenants (
    tenant_id   uuid        PRIMARY KEY,
    name        text        NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Bearer tokens, stored as SHA-256 of the token (tokens are 256-bit random, so no salt is needed).
CREATE TABLE api_tokens (
    token_hash  bytea       PRIMARY KEY,
    token_id    uuid        NOT NULL UNIQUE,
    tenant_id   uuid        NOT NULL REFERENCES tenants (tenant_id),
    scopes      text[]      NOT NULL CHECK (scopes <@ ARRAY['ingest', 'read', 'admin']::text[] AND cardinality(scopes) > 0),
    user_id     text,
    device_id   text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz
);
CREATE INDEX api_tokens_tenant ON api_tokens (tenant_id);

-- Devices: liveness (any batch, heartbeats) and the agent's last reported backlog.
CREATE TABLE devices (
    tenant_id                   uuid        NOT NULL,
    device_id                   text        NOT NULL,
    user_id                     text        NOT NULL DEFAULT '',
    first_seen_at               timestamptz NOT NULL,
    -- server clock of the last batch that came from this device over HTTP
    last_seen_at                timestamptz,
    -- server clock of the last heartbeat received
    last_heartbeat_at           timestamptz,
    -- the (corrected) event time of the heartbeat the fields below come from; orders late arrivals
    heartbeat_event_at          timestamptz,
    agent_version               text,
    backlog_events              bigint,
    backlog_bytes               bigint,
    oldest_pending_age_seconds  double precision,
    sync_state                  text,
    PRIMARY KEY (tenant_id, device_id)
);

-- Sessions: identity bound once (first binding wins), plus the facts the status is derived from. Each fact
-- carries the event time it came from so late or out-of-order events never overwrite a newer fact.
-- `status` is the lifecycle the events state (running | paused | completed | failed); the status the API
-- reports (active | idle | stalled | failed | completed | offline) is derived at read time from these facts,
-- the device's liveness and the configured thresholds, because it depends on the clock.
CREATE TABLE sessions (
    tenant_id          uuid        NOT NULL,
    session_id         text        NOT NULL,
    user_id            text        NOT NULL DEFAULT '',
    device_id          text        NOT NULL DEFAULT '',
    parent_session_id  text,
    colony_id          text,
    agent_role         text,
    worker_id          text,
    runtime            text,
    first_seen_at      timestamptz NOT NULL,
    last_event_at      timestamptz,
    last_received_at   timestamptz,
    last_progress_at   timestamptz,
    phase              text,
    phase_at           timestamptz,
    input_state        text,
    input_at           timestamptz,
    status             text,
    status_at          timestamptz,
    health_signal      text,
    health_at          timestamptz,
    events             bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX sessions_parent ON sessions (tenant_id, parent_session_id) WHERE parent_session_id IS NOT NULL;
CREATE INDEX sessions_colony ON sessions (tenant_id, colony_id) WHERE colony_id IS NOT NULL;

-- Dedup keys (see the header). effective_at is kept only for retention.
CREATE TABLE event_keys (
    tenant_id     uuid        NOT NULL,
    event_id      uuid        NOT NULL,
    effective_at  timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, event_id)
);

-- Raw events, partitioned by day of effective_at (occurred_at corrected for device clock skew, see
-- ingest/src/intake.rs). No unique key here on purpose: dedup is event_keys' job. Usage is read from
-- `data` (allowlisted fields only); identity columns are resolved from the session binding at ingest.
CREATE TABLE events (
    tenant_id          uuid        NOT NULL,
    effective_at       timestamptz NOT NULL,
    event_id           uuid        NOT NULL,
    occurred_at        timestamptz NOT NULL,
    received_at        timestamptz NOT NULL,
    kind               text        NOT NULL,
    runtime            text        NOT NULL,
    native_type        text        NOT NULL,
    session_id         text        NOT NULL DEFAULT '',
    user_id            text        NOT NULL DEFAULT '',
    device_id          text        NOT NULL DEFAULT '',
    colony_id          text        NOT NULL DEFAULT '',
    parent_session_id  text,
    worker_id          text,
    agent_role         text,
    node_id            text,
    execution_id       text,
    trace_id           text,
    model              text        NOT NULL DEFAULT '',
    data               jsonb       NOT NULL
) PARTITION BY RANGE (effective_at);

-- Usage rollups at a 15-minute grain of effective_at. Every UTC offset in use today is a multiple of 15
-- minutes (Asia/Kolkata +05:30, Asia/Kathmandu +05:45, Pacific/Chatham +12:45), so hour, day and month
-- buckets in ANY IANA zone are exact unions of 15-minute buckets, across DST changes too. Empty strings
-- stand for "none" so the key has no NULLs. cost is kept in integer nano-dollars so sums are exact.
CREATE TABLE usage_rollups (
    tenant_id              uuid        NOT NULL,
    bucket                 timestamptz NOT NULL,
    user_id                text        NOT NULL,
    device_id              text        NOT NULL,
    colony_id              text        NOT NULL,
    session_id             text        NOT NULL,
    model                  text        NOT NULL,
    input_tokens           bigint      NOT NULL DEFAULT 0,
    output_tokens          bigint      NOT NULL DEFAULT 0,
    cached_tokens          bigint      NOT NULL DEFAULT 0,
    cache_creation_tokens  bigint      NOT NULL DEFAULT 0,
    cost_nanos             bigint      NOT NULL DEFAULT 0,
    llm_calls              bigint      NOT NULL DEFAULT 0,
    unpriced_turns         bigint      NOT NULL DEFAULT 0,
    tool_calls             bigint      NOT NULL DEFAULT 0,
    tool_errors            bigint      NOT NULL DEFAULT 0,
    events                 bigint      NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model)
);
CREATE INDEX usage_rollups_session ON usage_rollups (tenant_id, session_id);
CREATE INDEX usage_rollups_colony ON usage_rollups (tenant_id, colony_id) WHERE colony_id <> '';

-- Creates the daily partitions of `events` covering [from_day, to_day] (inclusive) that do not exist yet.
-- Serialised by an advisory lock so that replicas creating the same partition at once cannot collide.
CREATE FUNCTION apiary_ensure_event_partitions(from_day date, to_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    d date := from_day;
    created integer := 0;
    part text;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('apiary_event_partitions'));
    WHILE d <= to_day LOOP
        part := 'events_' || to_char(d, 'YYYYMMDD');
        IF to_regclass(part) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE %I PARTITION OF events FOR VALUES FROM (%L) TO (%L)',
                part, (d::timestamp AT TIME ZONE 'UTC'), ((d + 1)::timestamp AT TIME ZONE 'UTC'));
            created := created + 1;
        END IF;
        d := d + 1;
    END LOOP;
    RETURN created;
END $$;

-- Retention: drops every daily partition that ends on or before `cutoff_day` and forgets the dedup keys of
-- the events it held. Returns the number of partitions dropped.
CREATE FUNCTION apiary_drop_event_partitions(cutoff_day date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    dropped integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('apiary_event_partitions'));
    FOR r IN
        SELECT c.relname
        FROM pg_inherits i
        JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'events'::regclass
          AND c.relname ~ '^events_[0-9]{8}$'
          AND to_date(substr(c.relname, 8), 'YYYYMMDD') < cutoff_day
    LOOP
        EXECUTE format('DROP TABLE %I', r.relname);
        dropped := dropped + 1;
    END LOOP;
    DELETE FROM event_keys WHERE effective_at < (cutoff_day::timestamp AT TIME ZONE 'UTC');
    RETURN dropped;
END $$;
