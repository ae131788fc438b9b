-- Usage exports: where a tenant's usage is pushed as OTLP metrics, how often and labelled by what, and
-- the delivery state (ingest/src/exports/). Replicas claim a due export with FOR UPDATE SKIP LOCKED and
-- a lease, so one replica sends it at a time; every send carries the cumulative sums since `start_at`,
-- so a repeated or lost send changes nothing a backend computes.

CREATE TABLE usage_exports (
    tenant_id        uuid        NOT NULL REFERENCES tenants (tenant_id),
    export_id        text        NOT NULL,
    -- the OTLP/HTTP metrics endpoint (https://…/v1/metrics)
    url              text        NOT NULL,
    -- request headers, e.g. an API key (never returned by the API after creation)
    headers          jsonb       NOT NULL DEFAULT '{}',
    interval_secs    integer     NOT NULL DEFAULT 60 CHECK (interval_secs BETWEEN 1 AND 86400),
    -- the dimensions each point is attributed with (user, model, colony, runtime, device)
    dimensions       text[]      NOT NULL DEFAULT '{}',
    -- the start time of every cumulative point: fixed at creation
    start_at         timestamptz NOT NULL DEFAULT now(),
    next_at          timestamptz NOT NULL DEFAULT now(),
    -- a replica sending it holds it until then (one that died mid-send lets it go)
    lease_until      timestamptz,
    -- claims so far (a claim's number fences a replica whose lease lapsed)
    claims           bigint      NOT NULL DEFAULT 0,
    -- failed sends since the last success (the retry backoff's exponent)
    failures         integer     NOT NULL DEFAULT 0,
    last_attempt_at  timestamptz,
    last_success_at  timestamptz,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, export_id)
);
CREATE INDEX usage_exports_due ON usage_exports (next_at);
