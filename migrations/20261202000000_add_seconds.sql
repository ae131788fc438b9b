-- `apiary_add_seconds(t, secs)`: `t + secs seconds`, declared IMMUTABLE (issue 16, Citus).
--
-- Postgres marks `timestamptz ± interval` STABLE, because an interval of days or months depends on the
-- session's time zone; Citus refuses any function that is not IMMUTABLE in the DO UPDATE SET clause of an
-- upsert on a distributed table (it runs on a worker, after the coordinator's evaluation). A number of
-- seconds is the same span in every zone, so this sum is immutable; the live stream's upsert of
-- `stream_sessions` uses it (ingest/src/store/stream.rs). On Citus it is created on the workers too
-- (store::citus::WORKER_FUNCTIONS).
CREATE FUNCTION apiary_add_seconds(t timestamptz, secs double precision) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT t + make_interval(secs => secs)
$$;
