-- Colony names, opt-in per tenant.
--
-- A tenant's choice for colony names: 'keys' (the default: a colony is known here only by its key, the
-- name never leaves a device) or 'names' (a device whose user turned sharing on while the tenant said
-- 'names' sends each colony's name beside its key). Set by the tenant's admin (PUT /v1/tenant/settings,
-- `apiary-ingest tenant set --colony-names`), told to devices by GET /v1/whoami. Names sent while the
-- tenant says 'keys' are dropped before anything is stored.
ALTER TABLE tenants ADD COLUMN colony_names text NOT NULL DEFAULT 'keys'
    CHECK (colony_names IN ('keys', 'names'));

-- The name a run's colony.created event carried (only under 'names'); NULL otherwise. One line of at most
-- 128 characters, scrubbed by the policy on the device and checked again here.
ALTER TABLE colony_runs ADD COLUMN colony_name text CHECK (length(colony_name) BETWEEN 1 AND 128);
