-- Usage per tool at coarser grains, without device, colony and session (key: tenant, bucket, user,
-- runtime, tool name): per UTC hour (`tool_rollups_hourly`), UTC day (`tool_rollups_daily`) and UTC month
-- (`tool_rollups_monthly`) (ingest/src/tool_rollups.rs).
--
-- Why: `group_by=tool` read only the 15-minute `tool_rollups` rows, one per session, tool and quarter
-- hour: a year of a 1,000-user organisation at a twentieth of its size read 132,000 pages (about 4 s),
-- and the cost grew with the history. A query grouped by tool (with tenant, user or runtime at most) now
-- reads each UTC unit of its range at the coarsest grain no bucket boundary cuts, as the usage queries
-- do (ingest/src/query/usage/split.rs).
--
-- Exactness: written in the same statement as `tool_rollups` from the same pre-aggregated rows, so an
-- hourly row is always the sum of its quarter rows, a daily row of its hours and a monthly row of its
-- days; the histograms merge by element-wise addition as the quarter rows' do. Their sums stay within a
-- bigint because the usage rows of the same bucket and user (model '', where tool calls are counted)
-- bound them and the batch writer keeps those within it (store::headroom).
--
-- One index each, the primary key, without the sums: a row is mostly its histogram, which every read
-- needs, so an index carrying it would be about as large as the table, and every write would log both
-- (docs/performance.md). An update then changes no indexed column and can stay on its heap page. Histograms are stored without
-- their trailing zero slots (a missing slot counts 0), here as in `tool_rollups` from now on.
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from `tool_rollups`; a
-- replica still running the old code would not update these tables).
CREATE TABLE tool_rollups_hourly (
    tenant_id      uuid        NOT NULL,
    bucket         timestamptz NOT NULL,
    user_id        text        NOT NULL,
    runtime        text        NOT NULL,
    tool_name      text        NOT NULL,
    calls          bigint      NOT NULL DEFAULT 0,
    errors         bigint      NOT NULL DEFAULT 0,
    timed_calls    bigint      NOT NULL DEFAULT 0,
    duration_ms    bigint      NOT NULL DEFAULT 0,
    duration_hist  int8[]      NOT NULL,
    CONSTRAINT tool_rollups_hourly_pkey PRIMARY KEY (tenant_id, bucket, user_id, runtime, tool_name),
    CONSTRAINT tool_rollups_hourly_on_the_hour CHECK (date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') = bucket)
);

CREATE TABLE tool_rollups_daily (LIKE tool_rollups_hourly INCLUDING DEFAULTS);
ALTER TABLE tool_rollups_daily
    ADD CONSTRAINT tool_rollups_daily_pkey PRIMARY KEY (tenant_id, bucket, user_id, runtime, tool_name),
    ADD CONSTRAINT tool_rollups_daily_on_the_day CHECK (date_bin('1 day', bucket, '2000-01-01 00:00:00+00') = bucket);

CREATE TABLE tool_rollups_monthly (LIKE tool_rollups_hourly INCLUDING DEFAULTS);
ALTER TABLE tool_rollups_monthly
    ADD CONSTRAINT tool_rollups_monthly_pkey PRIMARY KEY (tenant_id, bucket, user_id, runtime, tool_name),
    ADD CONSTRAINT tool_rollups_monthly_on_the_month
        CHECK (date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = bucket);

-- The histograms of a group added slot by slot (`apiary_hist_sum`, the tool durations migration; empty
-- for a group without a timed call).
INSERT INTO tool_rollups_hourly
SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00'), user_id, runtime, tool_name,
    sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups
GROUP BY 1, 2, 3, 4, 5;

INSERT INTO tool_rollups_daily
SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, runtime, tool_name,
    sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups_hourly
GROUP BY 1, 2, 3, 4, 5;

INSERT INTO tool_rollups_monthly
SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, runtime, tool_name,
    sum(calls), sum(errors), sum(timed_calls), sum(duration_ms),
    COALESCE(apiary_hist_sum(duration_hist), '{}')
FROM tool_rollups_daily
GROUP BY 1, 2, 3, 4, 5;
