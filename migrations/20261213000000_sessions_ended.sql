-- A session's end, as its status tracker reads it: `ended` is 'completed' or 'failed' while the tracker's
-- current status is one of them, NULL otherwise (ingest/src/store/health.rs writes it with the tracker).
--
-- Why: `GET /v1/sessions?status=…` derives each session's status at read time (time passing and the
-- device's liveness move an open session between active, idle, stalled, offline…), so the list read the
-- tenant's sessions newest first and kept those whose derived status matched: for a status no recent
-- session had, every request looked at 10,000 sessions (the scan's bound) and returned a short page. An
-- ended session's status is its end whatever the time and its device (`completed` and `failed` take no
-- overlay; only a new input starts a new run, and the batch that brings it rewrites this column), and an
-- open one's is neither, so the list now asks the database only for the sessions that can match: the
-- open ones when any other status is asked for (their status is still derived at read time), the
-- completed or failed ones when those are (ingest/src/query/sessions/list.rs).
--
-- Two partial indexes, by recency: the open sessions and the failed ones, each a small part of a tenant's
-- history, so a filter walks only them; completed sessions are read through `sessions_recent`.
ALTER TABLE sessions ADD COLUMN ended text CHECK (ended IN ('completed', 'failed'));

-- Existing trackers: the current run is the last lifecycle input of the re-order window (`pending`,
-- sorted as it is folded; a `step` changes nothing), else the settled one; the status is completed or
-- failed exactly when that run is (shared-schema/src/status/health.rs, `derive`). Sessions without a
-- tracker (read as `idle` until a batch rebuilds it) stay NULL.
UPDATE sessions s
SET ended = r.run
FROM (
    SELECT tenant_id, session_id,
        COALESCE(
            (SELECT p.i->'what'->>'run'
             FROM jsonb_array_elements(CASE WHEN jsonb_typeof(health->'pending') = 'array'
                                            THEN health->'pending' ELSE '[]'::jsonb END)
                  WITH ORDINALITY AS p(i, n)
             WHERE p.i->'what'->>'k' = 'run' AND p.i->'what'->>'run' <> 'step'
             ORDER BY p.n DESC
             LIMIT 1),
            health->'settled'->>'run') AS run
    FROM sessions
    WHERE health IS NOT NULL
) r
WHERE s.tenant_id = r.tenant_id AND s.session_id = r.session_id AND r.run IN ('completed', 'failed');

CREATE INDEX sessions_open_recent
    ON sessions (tenant_id, (COALESCE(last_event_at, first_seen_at)), session_id)
    WHERE ended IS NULL;
CREATE INDEX sessions_failed_recent
    ON sessions (tenant_id, (COALESCE(last_event_at, first_seen_at)), session_id)
    WHERE ended = 'failed';
