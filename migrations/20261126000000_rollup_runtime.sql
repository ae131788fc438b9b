-- The runtime (`hive`, `claude_code`, `otel`, ...) becomes a dimension of the usage rollups, so
-- `/v1/usage?group_by=runtime` answers what each runtime used (issue 15). It joins the key of both rollups
-- (last, after model) and the covering index.
--
-- Backfill: a rollup row's session tells its runtime (every event of a session comes from one runtime),
-- so existing rows take `sessions.runtime`; a row without a session, or of a session without a stored
-- runtime, keeps '' ("unknown", shown as null). Both tables are backfilled by the same rule, so an hourly
-- row stays the sum of its quarter rows. Adding a key column only splits keys, so no two rows collide.
--
-- Upgrading: stop the ingest replicas while this migration runs (a replica running the old code would
-- write rows without a runtime under the new key).
ALTER TABLE usage_rollups ADD COLUMN runtime text NOT NULL DEFAULT '';
ALTER TABLE usage_rollups_hourly ADD COLUMN runtime text NOT NULL DEFAULT '';

UPDATE usage_rollups r SET runtime = s.runtime
FROM sessions s
WHERE s.tenant_id = r.tenant_id AND s.session_id = r.session_id AND r.session_id <> '' AND s.runtime IS NOT NULL;

UPDATE usage_rollups_hourly r SET runtime = s.runtime
FROM sessions s
WHERE s.tenant_id = r.tenant_id AND s.session_id = r.session_id AND r.session_id <> '' AND s.runtime IS NOT NULL;

ALTER TABLE usage_rollups DROP CONSTRAINT usage_rollups_pkey;
ALTER TABLE usage_rollups ADD PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime);

ALTER TABLE usage_rollups_hourly DROP CONSTRAINT usage_rollups_hourly_pkey;
ALTER TABLE usage_rollups_hourly ADD CONSTRAINT usage_rollups_hourly_pkey
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime)
    INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
             unpriced_turns, tool_calls, tool_errors, events);

DROP INDEX usage_rollups_cover;
CREATE INDEX usage_rollups_cover ON usage_rollups (tenant_id, bucket)
    INCLUDE (user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens, cached_tokens,
             cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events);
