-- Usage queries read a tenant's rollup rows for a time range. Rows of one tenant are scattered over the
-- heap (they are upserted as events arrive), so a plain index scan touched one heap page per row: 171 ms
-- for a tenant's 21k rows in the 10M-event benchmark. This covering index lets those queries run as
-- index-only scans (30 ms cold, see ingest/benches/rollups.rs); it is updated with every rollup upsert,
-- which the ingest benchmark includes.
CREATE INDEX usage_rollups_cover ON usage_rollups (tenant_id, bucket)
    INCLUDE (user_id, device_id, colony_id, session_id, model, input_tokens, output_tokens, cached_tokens,
             cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events);
