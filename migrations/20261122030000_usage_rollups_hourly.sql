-- A second usage rollup at the grain of one UTC hour, same key and sums as `usage_rollups` (15 minutes).
--
-- Why: a tenant-scoped usage query reads every 15-minute row of its range (21k rows for a tenant's
-- 30 days in the 10M-event benchmark); most local buckets (every bucket of a whole-hour zone, and all
-- but the edges of a day or month in a half- or quarter-hour zone) are unions of whole UTC hours, so the
-- query reads hourly rows there and 15-minute rows only in the hours a bucket boundary cuts
-- (ingest/src/query/usage.rs). Exactness is unchanged: both tables are updated from the same new events
-- in the same transaction (quarter rows first, then hourly, each in key order), and an hourly row is the
-- sum of its four quarter rows.
--
-- One index: the primary key carries the sums (INCLUDE), so it serves both the upsert's conflict check
-- and index-only scans.
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from `usage_rollups`; a
-- replica still running the old code would not update this table).
CREATE TABLE usage_rollups_hourly (
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
    CONSTRAINT usage_rollups_hourly_pkey PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events),
    CONSTRAINT usage_rollups_hourly_on_the_hour CHECK (date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') = bucket)
);

INSERT INTO usage_rollups_hourly
SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, colony_id, session_id,
    model, sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events)
FROM usage_rollups
GROUP BY 1, 2, 3, 4, 5, 6, 7;
