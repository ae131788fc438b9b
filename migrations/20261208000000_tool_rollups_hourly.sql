-- Tool rows per UTC hour: `tool_rollups` (15-minute buckets) summed per hour, with the same key columns
-- (ingest/src/tool_rollups.rs).
--
-- Why: `/v1/usage?group_by=tool` read the 15-minute rows only, so a tenant's year of tool usage was every
-- quarter-hour row of the year. Like `usage_rollups_hourly` for the usage sums, this table answers the
-- whole UTC hours of a tenant-wide query that no bucket boundary cuts, and the 15-minute rows the rest
-- (ingest/src/query/usage/split.rs).
--
-- Exactness: written in the same transaction from the same pre-aggregated rows as `tool_rollups` (the
-- quarter rows, then these, each in key order); a histogram merges by element-wise addition, so a row here
-- is always the sum of its quarter rows.
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from `tool_rollups`; a
-- replica still running the old code would not update this table).
CREATE TABLE tool_rollups_hourly (
    tenant_id      uuid        NOT NULL,
    bucket         timestamptz NOT NULL,
    user_id        text        NOT NULL,
    device_id      text        NOT NULL,
    colony_id      text        NOT NULL,
    session_id     text        NOT NULL,
    runtime        text        NOT NULL,
    tool_name      text        NOT NULL,
    calls          bigint      NOT NULL DEFAULT 0,
    errors         bigint      NOT NULL DEFAULT 0,
    timed_calls    bigint      NOT NULL DEFAULT 0,
    duration_ms    bigint      NOT NULL DEFAULT 0,
    duration_hist  int8[]      NOT NULL,
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name),
    CONSTRAINT tool_rollups_hourly_on_the_hour CHECK (date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') = bucket)
);

INSERT INTO tool_rollups_hourly
SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, colony_id, session_id,
    runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms), apiary_hist_sum(duration_hist)
FROM tool_rollups
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;
