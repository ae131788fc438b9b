-- Re-pricing audit (issue 17): one row per `POST /v1/prices/reprice`. Each bounded transaction of a run
-- adds its own counts here in the same transaction as its changes, so the row is exact even for a run
-- that stopped half-way (`finished_at` NULL; running it again finishes the job, it is idempotent).
CREATE TABLE price_reprices (
    tenant_id                   uuid        NOT NULL REFERENCES tenants (tenant_id),
    reprice_id                  uuid        NOT NULL,
    range_from                  timestamptz NOT NULL,
    range_to                    timestamptz NOT NULL,
    -- The tenant's price entries in force for the run (the shipped catalog is the build's).
    tenant_price_ids            text[]      NOT NULL,
    ingest_version              text        NOT NULL,
    started_at                  timestamptz NOT NULL DEFAULT now(),
    finished_at                 timestamptz,
    turns_examined              bigint      NOT NULL DEFAULT 0,
    turns_changed               bigint      NOT NULL DEFAULT 0,
    -- Changes to the summed `cost_nanos` and `cost_estimated_nanos` (numeric: exact whatever the size).
    cost_delta_nanos            numeric     NOT NULL DEFAULT 0,
    cost_estimated_delta_nanos  numeric     NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, reprice_id)
);
