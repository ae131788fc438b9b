-- Cost provenance and tenant prices (issue 17, items 1 and 2).
--
-- 1. `usage_rollups` and `usage_rollups_hourly` gain three sums (ingest/src/rollups.rs):
--    - `cost_reported_nanos`: the cost the producer sent with each turn (`cost_usd`, as sent), summed;
--    - `cost_estimated_nanos`: the catalog's estimate of each turn that a price matches (reported or not);
--    - `estimated_turns`: turns without a reported cost that the catalog priced.
--    `cost_nanos` becomes the cost shown: a turn's reported cost where it has one, else its estimate;
--    `unpriced_turns` now counts turns with neither. Existing rows were written before estimates existed,
--    so their cost so far is the reported one (`cost_reported_nanos = cost_nanos`, nothing estimated);
--    `POST /v1/prices/reprice` estimates a past period from its stored events.
-- 2. `events.cost_estimated_nanos`: the estimate a turn was stored with (NULL: no price matched, or not
--    a turn), so a re-pricing can take exactly that amount back out of the rollups. The reported cost
--    stays in `data.cost_usd` as sent.
-- 3. `tenant_prices`: a tenant's own price entries (the checked `PriceSpec`, apiary_schema::prices), which
--    win over the shipped catalog.
--
-- Stop the ingest replicas while this migration runs (an old replica would not write the new columns).

ALTER TABLE usage_rollups
    ADD COLUMN cost_reported_nanos bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_estimated_nanos bigint NOT NULL DEFAULT 0,
    ADD COLUMN estimated_turns bigint NOT NULL DEFAULT 0;
ALTER TABLE usage_rollups_hourly
    ADD COLUMN cost_reported_nanos bigint NOT NULL DEFAULT 0,
    ADD COLUMN cost_estimated_nanos bigint NOT NULL DEFAULT 0,
    ADD COLUMN estimated_turns bigint NOT NULL DEFAULT 0;
UPDATE usage_rollups SET cost_reported_nanos = cost_nanos WHERE cost_nanos <> 0;
UPDATE usage_rollups_hourly SET cost_reported_nanos = cost_nanos WHERE cost_nanos <> 0;

-- The hourly key and the quarter table's covering index carry the sums, the new ones included.
ALTER TABLE usage_rollups_hourly DROP CONSTRAINT usage_rollups_hourly_pkey;
ALTER TABLE usage_rollups_hourly ADD CONSTRAINT usage_rollups_hourly_pkey
    PRIMARY KEY (tenant_id, bucket, user_id, device_id, colony_id, session_id, model, runtime)
    INCLUDE (input_tokens, output_tokens, cached_tokens, cache_creation_tokens, cost_nanos, llm_calls,
             unpriced_turns, tool_calls, tool_errors, events, tool_duration_ms, active_ms,
             cost_reported_nanos, cost_estimated_nanos, estimated_turns);
DROP INDEX usage_rollups_cover;
CREATE INDEX usage_rollups_cover ON usage_rollups (tenant_id, bucket)
    INCLUDE (user_id, device_id, colony_id, session_id, model, runtime, input_tokens, output_tokens, cached_tokens,
             cache_creation_tokens, cost_nanos, llm_calls, unpriced_turns, tool_calls, tool_errors, events,
             tool_duration_ms, active_ms, cost_reported_nanos, cost_estimated_nanos, estimated_turns);

ALTER TABLE events ADD COLUMN cost_estimated_nanos bigint;

CREATE TABLE tenant_prices (
    tenant_id   uuid        NOT NULL REFERENCES tenants (tenant_id),
    price_id    text        NOT NULL,
    -- The entry as accepted (apiary_schema::prices::PriceSpec, JSON), checked again when read.
    spec        jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, price_id)
);
