-- Events the device's agent reported as dropped (`outbox.dropped`: evicted at the outbox cap, or dead
-- letters), summed over newly stored events only, so a redelivered report never counts twice. Device-level
-- events (heartbeats, drop reports) update `devices` and never the usage rollups.
ALTER TABLE devices ADD COLUMN dropped_events bigint NOT NULL DEFAULT 0;
