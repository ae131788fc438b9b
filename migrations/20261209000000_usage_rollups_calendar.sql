-- Two more usage rollups with the narrow key (tenant, bucket, user, model, runtime): per UTC day
-- (`usage_rollups_daily`) and per UTC month (`usage_rollups_monthly`) (ingest/src/rollups.rs).
--
-- Why: a tenant's year of usage grouped by nothing, user, model or runtime read every narrow hourly row
-- of the year (28,000 pages at a twentieth of a 1,000-user organisation, 0.35–0.6 s, and twenty times
-- that at full size): the hourly rows grow with the hours a tenant is busy. A query now reads whole UTC
-- months from the monthly rows, whole days around them from the daily rows, and hours and quarters only
-- at the edges and where a bucket of its zone cuts a day (ingest/src/query/usage/split.rs).
--
-- Exactness: written in the same statement as `usage_rollups_narrow` from the same pre-aggregated rows,
-- after the quarter and hourly tables and in key order, so a daily row is always the sum of its hours
-- and a monthly row the sum of its days; the batch writer keeps each of their sums within a bigint as it
-- does for the others (store::headroom).
--
-- One index each: the primary key carries the sums (INCLUDE), for the upsert and index-only scans. Without
-- them an update could be heap-only and write less WAL, but every row read would fetch a heap page: for
-- 30 days by day, 13,700 pages instead of 930 (docs/performance.md).
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from
-- `usage_rollups_narrow`; a replica still running the old code would not update these tables).
CREATE TABLE usage_rollups_daily (
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
    CONSTRAINT usage_rollups_daily_pkey PRIMARY KEY (tenant_id, bucket, user_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns),
    CONSTRAINT usage_rollups_daily_on_the_day CHECK (date_bin('1 day', bucket, '2000-01-01 00:00:00+00') = bucket)
);

CREATE TABLE usage_rollups_monthly (LIKE usage_rollups_daily INCLUDING DEFAULTS);
ALTER TABLE usage_rollups_monthly
    ADD CONSTRAINT usage_rollups_monthly_pkey PRIMARY KEY (tenant_id, bucket, user_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns),
    ADD CONSTRAINT usage_rollups_monthly_on_the_month
        CHECK (date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = bucket);

-- A backfilled sum past the bigint range fails this migration (the ingest then refuses to start and
-- says so) rather than wrapping.
INSERT INTO usage_rollups_daily
SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, model, runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_narrow
GROUP BY 1, 2, 3, 4, 5;

INSERT INTO usage_rollups_monthly
SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, model, runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_daily
GROUP BY 1, 2, 3, 4, 5;
