-- Budgets (issue 17, item 3): a tenant's spending or token limits per day, week or month in an IANA zone,
-- and the thresholds each crossed, once per period (ingest/src/budgets.rs).
--
-- A budget's scope is the tenant, narrowed by any of a user, a model and a colony key (NULL: any). Its
-- limit is an exact integer in its unit: nano-USD (`usd`, compared with the rollups' `cost_nanos`) or
-- tokens (`tokens`, input + output tokens). Spend is read from the usage rollups, never kept here.
CREATE TABLE budgets (
    tenant_id     uuid        NOT NULL REFERENCES tenants (tenant_id),
    budget_id     text        NOT NULL,
    name          text,
    scope_user    text,
    scope_model   text,
    scope_colony  text,
    period        text        NOT NULL CHECK (period IN ('day', 'week', 'month')),
    tz            text        NOT NULL,
    unit          text        NOT NULL CHECK (unit IN ('usd', 'tokens')),
    limit_amount  bigint      NOT NULL CHECK (limit_amount > 0),
    -- Percentages of the limit, ascending, distinct, 1..=1000.
    thresholds    integer[]   NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, budget_id)
);

-- One row per (budget, period, threshold) the spend reached: the primary key is what makes a crossing
-- happen once, whichever replica sees it first (INSERT … ON CONFLICT DO NOTHING). Alerts on budgets read
-- these rows.
CREATE TABLE budget_crossings (
    tenant_id          uuid        NOT NULL,
    budget_id          text        NOT NULL,
    period_start       timestamptz NOT NULL,
    threshold_percent  integer     NOT NULL,
    period_end         timestamptz NOT NULL,
    -- The spend and limit when the crossing was seen (in the budget's unit).
    spent              bigint      NOT NULL,
    limit_amount       bigint      NOT NULL,
    crossed_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, budget_id, period_start, threshold_percent),
    FOREIGN KEY (tenant_id, budget_id) REFERENCES budgets (tenant_id, budget_id) ON DELETE CASCADE
);
CREATE INDEX budget_crossings_recent ON budget_crossings (tenant_id, crossed_at);
