-- Tool-call durations, active time and usage per tool (issue 13, item 3).
--
-- 1. `usage_rollups` and `usage_rollups_hourly` gain two sums:
--    - `tool_duration_ms`: the `duration_ms` of completed tool calls, summed (the agent computes it for Hive
--      by pairing each call's start and completion; OpenTelemetry and Claude Code report their own). Read
--      from the same new events as the other sums, in the same transaction.
--    - `active_ms`: the milliseconds the session spent in status `active` by its status history
--      (`status_transitions`): from each transition to `active` to the next transition, and for a last one
--      to `sessions.stall_due_at` (when the no-progress rule ends it if nothing else arrives), in whole
--      milliseconds like the status model's time in state, split at the rollup's bucket boundaries by the
--      whole milliseconds since the stretch's start, so the pieces add up to it exactly. It is kept under the session's identity (user, device, colony and runtime of its row;
--      model ''). When a batch changes a session's history, the batch adds the new stretches and subtracts
--      the old ones in its transaction (ingest/src/store/active.rs).
-- 2. `tool_rollups`: per 15-minute bucket × user × device × colony × session × runtime × tool name, the
--    completed calls, errors, calls with a duration, their summed duration and a histogram of the
--    durations: `duration_hist[i]` (1-based) counts the durations d with width_bucket(d, bounds) = i − 1
--    for the fixed bounds below (0 ms, then bounds about √2 apart up to 67,108,864 ms ≈ 18.6 h), so two
--    histograms merge exactly by adding them element-wise (`apiary_hist_add`, `apiary_hist_sum`; the batch
--    writer does the same inline) and p50/p95 are read from the merged counts (ingest/src/tool_rollups.rs
--    holds the same bounds; a test compares them).
--
-- Backfill: tool durations and tool rows from the stored events (only those within the retention window:
-- older rollup rows keep 0 and are not in `tool_rollups`), active time from the stored status histories.
-- Stop the ingest replicas while this migration runs (an old replica would not write the new columns).

ALTER TABLE usage_rollups
    ADD COLUMN tool_duration_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN active_ms bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_rollups_hourly
    ADD COLUMN tool_duration_ms bigint NOT NULL DEFAULT 0,
    ADD COLUMN active_ms bigint NOT NULL DEFAULT 0;

-- The hourly key and the quarter table's covering index carry the sums, the new ones included.
ALTER TABLE usage_rollups_hourly DROP CONSTRAINT usage_rollups_hourly_pkey;
ALTER TABLE usage_rollups_hourly ADD CONSTRAINT usage_rollups_hourly_pkey
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime)
    INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
             unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms);
DROP INDEX usage_rollups_cover;
CREATE INDEX usage_rollups_cover ON usage_rollups (tenant_id, bucket)
    INCLUDE (user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens, cached_tokens,
             cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events,
             tool_duration_ms, active_ms);

-- Adds two histograms element-wise (a missing element counts 0).
CREATE FUNCTION apiary_hist_add(a int8[], b int8[]) RETURNS int8[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_agg(COALESCE(x, 0) + COALESCE(y, 0) ORDER BY i)
    FROM unnest(a, b) WITH ORDINALITY AS u(x, y, i)
$$;

-- The element-wise sum of histograms (NULL for no rows).
CREATE AGGREGATE apiary_hist_sum (int8[]) (
    SFUNC = apiary_hist_add,
    STYPE = int8[],
    COMBINEFUNC = apiary_hist_add,
    PARALLEL = SAFE
);

CREATE TABLE tool_rollups (
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
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name)
);
CREATE INDEX tool_rollups_session ON tool_rollups (tenant_id, session_id);
CREATE INDEX tool_rollups_colony ON tool_rollups (tenant_id, colony_id) WHERE colony_id <> '';

-- Backfill 1: tool durations of the stored completed calls.
CREATE TEMPORARY TABLE apiary_tool_durations ON COMMIT DROP AS
SELECT tenant_id, date_bin('15 minutes', effective_at, '2000-01-01 00:00:00+00') AS bucket, user_id, device_id,
    colony_id, session_id, model, runtime, sum((data->>'duration_ms')::int8) AS ms
FROM events
WHERE kind = 'tool.call' AND data->>'status' = 'completed' AND data ? 'duration_ms'
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;

UPDATE usage_rollups r SET tool_duration_ms = d.ms
FROM apiary_tool_durations d
WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.user_id = d.user_id AND r.device_id = d.device_id
  AND r.colony_id = d.colony_id AND r.session_id = d.session_id AND r.model = d.model AND r.runtime = d.runtime;

UPDATE usage_rollups_hourly r SET tool_duration_ms = d.ms
FROM (SELECT tenant_id, date_bin('1 hour', bucket, '2000-01-01 00:00:00+00') AS bucket, user_id, device_id, colony_id,
          session_id, model, runtime, sum(ms) AS ms
      FROM apiary_tool_durations GROUP BY 1, 2, 3, 4, 5, 6, 7, 8) d
WHERE r.tenant_id = d.tenant_id AND r.bucket = d.bucket AND r.user_id = d.user_id AND r.device_id = d.device_id
  AND r.colony_id = d.colony_id AND r.session_id = d.session_id AND r.model = d.model AND r.runtime = d.runtime;

-- Backfill 2: the tool rows of the stored completed calls (per key and histogram slot first, then each slot's
-- count placed in a one-hot histogram and the histograms of a key added up).
INSERT INTO tool_rollups (tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name, calls,
    errors, timed_calls, duration_ms, duration_hist)
SELECT tenant_id, bucket, user_id, device_id, colony_id, session_id, runtime, tool_name, sum(calls), sum(errors),
    sum(timed), sum(ms),
    apiary_hist_sum(CASE WHEN slot = 0 THEN array_fill(0::int8, ARRAY[53])
        ELSE array_fill(0::int8, ARRAY[slot - 1]) || timed || array_fill(0::int8, ARRAY[53 - slot]) END)
FROM (
    SELECT tenant_id, date_bin('15 minutes', effective_at, '2000-01-01 00:00:00+00') AS bucket, user_id, device_id,
        colony_id, session_id, runtime, COALESCE(data->>'tool_name', '') AS tool_name,
        -- the histogram slot (1-based) of a timed call; 0 for a call without a duration
        CASE WHEN data ? 'duration_ms' THEN width_bucket((data->>'duration_ms')::int8,
            '{1,2,3,4,6,8,11,16,23,32,45,64,91,128,181,256,362,512,724,1024,1448,2048,2896,4096,5793,8192,11585,16384,23170,32768,46341,65536,92682,131072,185364,262144,370728,524288,741455,1048576,1482910,2097152,2965821,4194304,5931642,8388608,11863283,16777216,23726566,33554432,47453133,67108864}'::int8[]) + 1
            ELSE 0 END AS slot,
        count(*) AS calls,
        count(*) FILTER (WHERE data->>'is_error' = 'true') AS errors,
        count(*) FILTER (WHERE data ? 'duration_ms') AS timed,
        COALESCE(sum((data->>'duration_ms')::int8), 0) AS ms
    FROM events
    WHERE kind = 'tool.call' AND data->>'status' = 'completed'
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9
) c
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8;

-- Backfill 3: active time from the stored status histories.
CREATE TEMPORARY TABLE apiary_active_pieces ON COMMIT DROP AS
WITH t AS (
    SELECT tenant_id, session_id, seq, at, to_status,
        lead(at) OVER (PARTITION BY tenant_id, session_id ORDER BY seq) AS next_at
    FROM status_transitions
), stretch AS (
    SELECT t.tenant_id, t.session_id, t.at AS s, COALESCE(t.next_at, ss.stall_due_at) AS e
    FROM t JOIN sessions ss ON ss.tenant_id = t.tenant_id AND ss.session_id = t.session_id
    WHERE t.to_status = 'active' AND COALESCE(t.next_at, ss.stall_due_at) > t.at
)
SELECT st.tenant_id, st.session_id, b AS bucket,
    floor(extract(epoch FROM LEAST(st.e, b + interval '15 minutes') - st.s) * 1000)::int8
        - floor(extract(epoch FROM GREATEST(st.s, b) - st.s) * 1000)::int8 AS ms
FROM stretch st,
    generate_series(date_bin('15 minutes', st.s, '2000-01-01 00:00:00+00'), st.e - interval '1 microsecond',
                    interval '15 minutes') AS b;

INSERT INTO usage_rollups AS r (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime,
    active_ms)
SELECT p.tenant_id, p.bucket, s.user_id, s.device_id, COALESCE(s.colony_id, ''), p.session_id, '',
    COALESCE(s.runtime, ''), sum(p.ms)
FROM apiary_active_pieces p JOIN sessions s ON s.tenant_id = p.tenant_id AND s.session_id = p.session_id
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
HAVING sum(p.ms) <> 0
ON CONFLICT (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime) DO UPDATE SET
    active_ms = r.active_ms + EXCLUDED.active_ms;

INSERT INTO usage_rollups_hourly AS r (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime,
    active_ms)
SELECT p.tenant_id, date_bin('1 hour', p.bucket, '2000-01-01 00:00:00+00'), s.user_id, s.device_id,
    COALESCE(s.colony_id, ''), p.session_id, '', COALESCE(s.runtime, ''), sum(p.ms)
FROM apiary_active_pieces p JOIN sessions s ON s.tenant_id = p.tenant_id AND s.session_id = p.session_id
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8
HAVING sum(p.ms) <> 0
ON CONFLICT (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime) DO UPDATE SET
    active_ms = r.active_ms + EXCLUDED.active_ms;
