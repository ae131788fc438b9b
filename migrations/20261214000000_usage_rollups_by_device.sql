-- The device joins the narrow key: `usage_rollups_narrow`, `usage_rollups_daily` and
-- `usage_rollups_monthly` are keyed by (tenant, bucket, user, device, model, runtime) (ingest/src/rollups.rs,
-- `narrow_of`).
--
-- Why: usage grouped by device read the wide hourly rows (one per session and hour): a year of a
-- 1,000-user tenant by month took about a second at a twentieth of its sessions and grows with them. A
-- user works on one device or a few, so the device costs the narrow tables few rows (an hour of a user
-- is almost always one device), and a year by device now reads months and days like a year by user
-- (docs/performance.md).
--
-- Exactness: every narrow row was the sum of its hourly rows, every daily row the sum of its narrow
-- rows and every monthly row the sum of its daily rows (written together in each batch's transaction,
-- and by this migration in the same way): the three tables are rebuilt from `usage_rollups_hourly`, which
-- keeps the device, so they hold the same sums split by device.
--
-- Upgrading: stop the ingest replicas while this migration runs (a replica still running the old code
-- would write rows without their device). It rewrites the three tables from the hourly rollup: at a
-- twentieth of the year bench's organisation (1.17M hourly rows) it took 24 s.

ALTER TABLE usage_rollups_narrow DROP CONSTRAINT usage_rollups_narrow_pkey;
ALTER TABLE usage_rollups_daily DROP CONSTRAINT usage_rollups_daily_pkey;
ALTER TABLE usage_rollups_monthly DROP CONSTRAINT usage_rollups_monthly_pkey;
TRUNCATE usage_rollups_narrow, usage_rollups_daily, usage_rollups_monthly;
ALTER TABLE usage_rollups_narrow ADD COLUMN device_id text NOT NULL DEFAULT '';
ALTER TABLE usage_rollups_daily ADD COLUMN device_id text NOT NULL DEFAULT '';
ALTER TABLE usage_rollups_monthly ADD COLUMN device_id text NOT NULL DEFAULT '';

-- A rebuilt sum past the bigint range fails this migration (the ingest then refuses to start and says
-- so) rather than wrapping; the batch writer never stores one (store::headroom).
INSERT INTO usage_rollups_narrow (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
    output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
    tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos,
    estimated_turns)
SELECT tenant_id, bucket, user_id, device_id, model, runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_hourly
GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO usage_rollups_daily (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
    output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
    tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos,
    estimated_turns)
SELECT tenant_id, date_bin('1 day', bucket, '2000-01-01 00:00:00+00'), user_id, device_id, model, runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_narrow
GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO usage_rollups_monthly (tenant_id, bucket, user_id, device_id, model, runtime, input_tokens,
    output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls,
    tool_errors, events, tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos,
    estimated_turns)
SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', user_id, device_id, model,
    runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_daily
GROUP BY 1, 2, 3, 4, 5, 6;

-- The key carries the sums (INCLUDE), as before: it serves the upsert's conflict check and index-only
-- scans.
ALTER TABLE usage_rollups_narrow
    ADD CONSTRAINT usage_rollups_narrow_pkey PRIMARY KEY (tenant_id, bucket, user_id, device_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns);
ALTER TABLE usage_rollups_daily
    ADD CONSTRAINT usage_rollups_daily_pkey PRIMARY KEY (tenant_id, bucket, user_id, device_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns);
ALTER TABLE usage_rollups_monthly
    ADD CONSTRAINT usage_rollups_monthly_pkey PRIMARY KEY (tenant_id, bucket, user_id, device_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns);
