-- A third usage rollup: per UTC hour, keyed by (tenant, hour, user, model, runtime) only — the hourly
-- rollup without its device, colony and session columns (ingest/src/rollups.rs).
--
-- Why: the dashboard's overview and most `/v1/usage` questions group a tenant's usage by model, user or
-- nothing. `usage_rollups_hourly` has a row per session and hour, so a tenant with 10M events in 30 days
-- holds ~414k hourly rows and summing them took ~1 s (issue 14's target is 300 ms p95). Without the
-- session, device and colony the same month is ~43k rows (30 days × 24 h × users × models), and only
-- grows with the number of users and models, not with sessions.
--
-- Exactness: written in the same transaction from the same pre-aggregated map as the other two (quarter,
-- hourly, then this table, each in key order), so a row here is always the sum of its hourly rows. A
-- query grouped by colony, session or device, or scoped to a session or colony, still reads the wide
-- tables (`ingest/src/query/usage/plan.rs`).
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from
-- `usage_rollups_hourly`; a replica still running the old code would not update this table).
CREATE TABLE usage_rollups_narrow (
    tenant_id              uuid        NOT NULL,
    bucket                 timestamptz NOT NULL,
    user_id                text        NOT NULL,
    model                  text        NOT NULL,
    runtime                text        NOT NULL,
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
    tool_duration_ms       bigint      NOT NULL DEFAULT 0,
    active_ms              bigint      NOT NULL DEFAULT 0,
    cost_reported_nanos    bigint      NOT NULL DEFAULT 0,
    cost_estimated_nanos   bigint      NOT NULL DEFAULT 0,
    estimated_turns        bigint      NOT NULL DEFAULT 0,
    -- The key carries the sums (INCLUDE): it serves the upsert's conflict check and index-only scans.
    CONSTRAINT usage_rollups_narrow_pkey PRIMARY KEY (tenant_id, bucket, user_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns),
    CONSTRAINT usage_rollups_narrow_on_the_hour CHECK (date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') = bucket)
);

-- A backfilled sum past the bigint range fails this migration (the ingest then refuses to start and
-- says so) rather than wrapping; the ingest never writes such a row (store::headroom).
INSERT INTO usage_rollups_narrow
SELECT tenant_id, bucket, user_id, model, runtime, sum(input_tokens), sum(output_tokens), sum(cached_tokens),
    sum(cache_creation_tokens), sum(cost_nanos), sum(llm_calls), sum(unpriced_turns), sum(tool_calls),
    sum(tool_errors), sum(events), sum(tool_duration_ms), sum(active_ms), sum(cost_reported_nanos),
    sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_hourly
GROUP BY tenant_id, bucket, user_id, model, runtime;
