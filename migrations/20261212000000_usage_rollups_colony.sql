-- Usage per colony without the session and the user: per UTC day (`usage_rollups_colony_daily`) and UTC
-- month (`usage_rollups_colony_monthly`), key (tenant, bucket, colony_id, fork_session_id, model,
-- runtime) (ingest/src/rollups.rs).
--
-- Why: a query grouped by colony resolves each row's colony key from its colony id and, for a colony's
-- forked session, from its session (query::usage, `COLONY_KEY_OF_ROW`), so it read the wide hourly rows,
-- one per session and hour: a year of one tenant by colony read 33,000 pages and took 1.3 s at a
-- twentieth of a 1,000-user organisation, and the cost grew with the sessions. Here a day or a month is a
-- row per colony id, model and runtime, whatever the number of sessions and users. (With the user in the
-- key, the rows of usage in no colony — most of it — were as many as the narrow daily rows: 633,000
-- against 182,000 at that scale.) A read limited to one user, or grouped by user, reads the hourly rows.
--
-- `fork_session_id` keeps exactly what the colony key needs of the session: the session itself when it is
-- a colony run with a parent (a forked run, `colony_runs.parent_session_id IS NOT NULL`), else ''. The
-- batch writer decides it when it writes a row, from the runs it can see; a run that becomes forked (or
-- stops being forked) after its session's usage was written has that usage moved between '' and its
-- session in the same transaction (store::colonies). Forked runs are claimed like sessions, so a batch
-- with the session's usage and one with the run's `colony.created` never run side by side.
--
-- Exactness: written in the same statement as `usage_rollups_daily` and `_monthly` from the same rows,
-- so a colony day is always the sum of the wide hourly rows of its day, colony and (forked) session. Its
-- sums stay within a bigint because each row is part of the tenant's month of a model and runtime, which
-- the batch writer keeps within one (store::headroom).
--
-- Upgrading: stop the ingest replicas while this migration runs (it backfills from
-- `usage_rollups_hourly`; a replica still running the old code would not update these tables).
CREATE TABLE usage_rollups_colony_daily (
    tenant_id              uuid        NOT NULL,
    bucket                 timestamptz NOT NULL,
    colony_id              text        NOT NULL,
    fork_session_id        text        NOT NULL,
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
    CONSTRAINT usage_rollups_colony_daily_pkey
        PRIMARY KEY (tenant_id, bucket, colony_id, fork_session_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns),
    CONSTRAINT usage_rollups_colony_daily_on_the_day
        CHECK (date_bin('1 day', bucket, '2000-01-01 00:00:00+00') = bucket)
);

CREATE TABLE usage_rollups_colony_monthly (LIKE usage_rollups_colony_daily INCLUDING DEFAULTS);
ALTER TABLE usage_rollups_colony_monthly
    ADD CONSTRAINT usage_rollups_colony_monthly_pkey
        PRIMARY KEY (tenant_id, bucket, colony_id, fork_session_id, model, runtime)
        INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
                 unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
                 cost_reported_nanos, cost_estimated_nanos, estimated_turns),
    ADD CONSTRAINT usage_rollups_colony_monthly_on_the_month
        CHECK (date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' = bucket);

-- A backfilled sum past the bigint range fails this migration (the ingest then refuses to start and
-- says so) rather than wrapping.
INSERT INTO usage_rollups_colony_daily
SELECT h.tenant_id, date_bin('1 day', h.bucket, '2000-01-01 00:00:00+00'), h.colony_id,
    CASE WHEN f.session_id IS NULL THEN '' ELSE h.session_id END, h.model, h.runtime,
    sum(h.input_tokens), sum(h.output_tokens), sum(h.cached_tokens), sum(h.cache_creation_tokens),
    sum(h.cost_nanos), sum(h.llm_calls), sum(h.unpriced_turns), sum(h.tool_calls), sum(h.tool_errors),
    sum(h.events), sum(h.tool_duration_ms), sum(h.active_ms), sum(h.cost_reported_nanos),
    sum(h.cost_estimated_nanos), sum(h.estimated_turns)
FROM usage_rollups_hourly h
LEFT JOIN colony_runs f ON f.tenant_id = h.tenant_id AND f.session_id = h.session_id
    AND f.parent_session_id IS NOT NULL
GROUP BY 1, 2, 3, 4, 5, 6;

INSERT INTO usage_rollups_colony_monthly
SELECT tenant_id, date_trunc('month', bucket AT TIME ZONE 'UTC') AT TIME ZONE 'UTC', colony_id,
    fork_session_id, model, runtime,
    sum(input_tokens), sum(output_tokens), sum(cached_tokens), sum(cache_creation_tokens), sum(cost_nanos),
    sum(llm_calls), sum(unpriced_turns), sum(tool_calls), sum(tool_errors), sum(events), sum(tool_duration_ms),
    sum(active_ms), sum(cost_reported_nanos), sum(cost_estimated_nanos), sum(estimated_turns)
FROM usage_rollups_colony_daily
GROUP BY 1, 2, 3, 4, 5, 6;
