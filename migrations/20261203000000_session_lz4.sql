-- Session trackers and work (`sessions.health`, `sessions.work`, jsonb of 1-5 KiB) are rewritten by every
-- batch that touches the session, and stored compressed out of line (TOAST). PostgreSQL's default
-- compression, pglz, was 5-6% of the database's CPU under the fleet bench (ingest/benches/fleet.rs);
-- lz4 compresses several times faster. New values only: stored ones stay as they are until rewritten.
-- A server built without lz4 keeps pglz.
DO $$
BEGIN
    ALTER TABLE sessions ALTER COLUMN health SET COMPRESSION lz4, ALTER COLUMN work SET COMPRESSION lz4;
EXCEPTION WHEN OTHERS THEN
    -- An optimisation never stops an upgrade (a server without lz4: feature_not_supported).
    RAISE NOTICE 'sessions keep their compression: %', SQLERRM;
END
$$;
