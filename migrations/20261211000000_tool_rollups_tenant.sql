-- Usage per tool for the whole tenant (key: tenant, bucket, runtime, tool name), without the user:
-- per UTC hour (`tool_rollups_tenant_hourly`), UTC day (`tool_rollups_tenant_daily`) and UTC month
-- (`tool_rollups_tenant_monthly`) (ingest/src/tool_rollups.rs).
--
-- Why: a query grouped by tool alone (or with runtime) summed the per-user rows of
-- `tool_rollups_hourly`, `_daily` and `_monthly`: a 1,000-user organisation's year by month is a row per
-- user, tool, runtime and month (about 365,000 at a twentieth of its size, 55,000 pages, about 1 s), and
-- the cost grew with the users. These rows are a few hundred a year per tenant.
--
-- Exactness: written in the same statement as `tool_rollups` from the same pre-aggregated rows, so a
-- tenant row is always the sum of the per-user rows of its unit, runtime and tool. Its sums stay within a
-- bigint because the batch writer admits an event only when the tenant's month for its runtime, all
-- tools together, stays within it (store::headroom), which bounds every row here.
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from the per-user tables;
-- a replica still running the old code would not update these tables).
CREATE TABLE tool_rollups_tenant_hourly (
    tenant_id      uuid        NOT NULL,
    bucket         timestamptz NOT NULL,
    runtime        text        NOT NULL,
    tool_name      text        NOT NULL,
    calls          bigint      NOT NULL DEFAULT 0,
    errors         bigint      NOT NULL DEFAULT 0,
    timed_calls    bigint      NOT NULL DEFAULT 0,
    duration_ms    bigint      NOT NULL DEFAULT 0,
    duration_hist  int8[]      NOT NULL,
    CONSTRAINT tool_rollups_tenant_hourly_pkey PRIMARY KEY (tenant_id, bucket, runtime, tool_name),
    CONSTRAINT tool_rollups_tenant_hourly_on_the_hour
        CHECK (date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') = bucket)
);

CREATE TABLE tool_rollups_tenant_daily (LIKE tool_rollups_tenant_hourly INCLUDING DEFAULTS);
ALTER TABLE tool_rollups_tenant_daily
    ADD CONSTRAINT tool_rollups_tenant_daily_pkey PRIMARY KEY (tenant_id, bucket, runtime, tool_name),
    ADD CONSTRAINT tool_rollups_tenant_daily_on_the_day
        CHECK (date_bin('1 day', bucket, '2000-01-01 00:00:00+00') = bucket);

CREATE TABLE tool_rollups_tenant_monthly (LIKE tool_rollups_tenant_hourly INCLUDING DEFAULTS);
ALTER TABLE tool_rollups_tenant_monthly
    ADD CONSTRAINT tool_rollups_tenant_monthly_pkey PRIMARY KEY (tenant_id, bucket, runtime, tool_name),
    ADD CONSTRAINT tool_rollups_tenant_monthly_on_the_month
        CHECK (date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = bucket);

-- Each from the per-user table of the same grain (`apiary_hist_sum`, the tool durations migration).
INSERT INTO tool_rollups_tenant_hourly
SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups_hourly
GROUP BY 1, 2, 3, 4;

INSERT INTO tool_rollups_tenant_daily
SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups_daily
GROUP BY 1, 2, 3, 4;

INSERT INTO tool_rollups_tenant_monthly
SELECT tenant_id, bucket, runtime, tool_name, sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups_monthly
GROUP BY 1, 2, 3, 4;
