-- Device ownership and device signing keys.
--
-- 1. Device rows are per user: (tenant_id, device_id, user_id). A device id is chosen by its agent (or its
--    token), so two users of a tenant can name the same one; each sender writes only the row of its own
--    user (`''` for a sender bound to no user), and a read token bound to a user sees only its rows. A
--    token bound to the device, or a registered device key, claims the id for its user: senders of other
--    users are refused for it (ingest/src/store/device_owners.rs). The live stream's device state follows
--    the same key.
-- 2. `device_keys`: the Ed25519 public keys of devices, registered by the device itself (`POST
--    /v1/devices/key`, with a token bound to it) or by an admin (`apiary-ingest device register`). A
--    bundle sealed by an active key is imported as that device's user and device. At most one active key
--    per device; a key is never reused once revoked. Keyed by tenant first (Citus: distributed by
--    tenant_id, co-located with the other tenant tables).

ALTER TABLE devices DROP CONSTRAINT devices_pkey;
ALTER TABLE devices ADD PRIMARY KEY (tenant_id, device_id, user_id);

ALTER TABLE stream_devices DROP CONSTRAINT stream_devices_pkey;
ALTER TABLE stream_devices ADD PRIMARY KEY (tenant_id, device_id, user_id);

-- Which tokens name a device (the ownership check of senders not bound to a device, and the claim).
CREATE INDEX api_tokens_device ON api_tokens (tenant_id, device_id) WHERE device_id IS NOT NULL;

CREATE TABLE device_keys (
    tenant_id      uuid        NOT NULL,
    -- `SHA256:` + unpadded base64 of the SHA-256 of the 32 key bytes (apiary_schema::device_key)
    fingerprint    text        NOT NULL,
    public_key     bytea       NOT NULL CHECK (length(public_key) = 32),
    -- NULL: a device bound to no user (like a token made with --device only)
    user_id        text,
    device_id      text        NOT NULL,
    -- `device` (registered online with a token bound to the device) or `admin` (the command line)
    registered_by  text        NOT NULL CHECK (registered_by IN ('device', 'admin')),
    registered_at  timestamptz NOT NULL,
    revoked_at     timestamptz,
    PRIMARY KEY (tenant_id, fingerprint)
);
CREATE UNIQUE INDEX device_keys_active ON device_keys (tenant_id, device_id) WHERE revoked_at IS NULL;
