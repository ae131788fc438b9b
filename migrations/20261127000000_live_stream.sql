-- The live stream (`GET /v1/stream`, issue 13 item 7): what dashboards are pushed, as rows written in the
-- transaction that caused them (a batch, or the stream's own upkeep), so a rolled-back batch streams
-- nothing and every replica serves the same stream.
--
-- Order. `id` (bigserial) alone is NOT commit order: a transaction holding id 10 can commit after one
-- holding id 11, and a reader that already passed 11 would never see 10. So each row also carries `xid`, at
-- least the id of its writing transaction (`pg_current_xact_id()`, 64 bits: never wraps); the stream is
-- ordered by (xid, id), and a reader delivers only rows with `xid` below the xmin of its own snapshot
-- (`pg_snapshot_xmin(pg_current_snapshot())`). Every transaction below that xmin has ended, and any
-- transaction still to commit has an id at or above it, so no row can ever appear below a position that
-- was delivered: resuming after a position (`Last-Event-ID`) misses nothing.
--
-- Two writers of one session (or device) run one after the other under its row lock, but the later one
-- may hold the lower transaction id. So `xid` is raised to the entity's `last_xid` (stream_sessions,
-- stream_devices), read and written under that lock: a session's rows come in the order they were
-- committed. Raising `xid` above the writer's own id only delays delivery; the rule above still holds.
--
-- Kinds: `status` (a stored status transition), `usage` (a session's new usage totals, at most once a
-- second per session: see stream_sessions), `device` (a device heard from again, or gone silent past
-- offline_after_secs). `user_id` is the owner of the session or device, for user-bound read tokens.
--
-- Retention: 24 hours (the ingest prunes older rows); `stream_horizon` keeps per tenant the greatest
-- position pruned, so a cursor older than the window is told to reload instead of silently skipping.
CREATE TABLE stream_events (
    tenant_id  uuid        NOT NULL,
    xid        bigint      NOT NULL,
    id         bigserial   NOT NULL,
    at         timestamptz NOT NULL DEFAULT now(),
    kind       text        NOT NULL CHECK (kind IN ('status', 'usage', 'device')),
    user_id    text        NOT NULL DEFAULT '',
    data       jsonb       NOT NULL,
    PRIMARY KEY (tenant_id, xid, id)
);
-- The replica's one reader scans every tenant in stream order.
CREATE INDEX stream_events_order ON stream_events (xid, id);
CREATE INDEX stream_events_at ON stream_events (at);

CREATE TABLE stream_horizon (
    tenant_id  uuid   PRIMARY KEY,
    xid        bigint NOT NULL,
    id         bigint NOT NULL
);

-- Per session: the stream order (`last_xid`, see above) and usage coalescing: `usage_sent_at` is when a
-- usage row was last written; a batch that comes within a second of it sets `usage_due_at` instead, and
-- the ingest's upkeep writes the session's totals then (any replica; rows claimed with SKIP LOCKED).
CREATE TABLE stream_sessions (
    tenant_id      uuid        NOT NULL,
    session_id     text        NOT NULL,
    user_id        text        NOT NULL DEFAULT '',
    last_xid       bigint      NOT NULL,
    touched_at     timestamptz NOT NULL,
    usage_sent_at  timestamptz,
    usage_due_at   timestamptz,
    PRIMARY KEY (tenant_id, session_id)
);
CREATE INDEX stream_sessions_due ON stream_sessions (usage_due_at) WHERE usage_due_at IS NOT NULL;

-- Device liveness as last announced on the stream (`online`), so each change is streamed once.
CREATE TABLE stream_devices (
    tenant_id  uuid    NOT NULL,
    device_id  text    NOT NULL,
    user_id    text    NOT NULL DEFAULT '',
    online     boolean NOT NULL,
    last_xid   bigint  NOT NULL,
    PRIMARY KEY (tenant_id, device_id)
);
CREATE INDEX stream_devices_online ON stream_devices (tenant_id, device_id) WHERE online;
