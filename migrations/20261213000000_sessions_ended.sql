-- A session's end, as its status tracker reads it: `ended` is 'completed' or 'failed' while the tracker's
-- current status is one of them, NULL otherwise (ingest/src/store/health.rs writes it with the tracker).
--
-- Why: `GET /v1/sessions?status=…` derives each session's status at read time (time passing and the
-- device's liveness move an open session between active, idle, stalled, offline…), so the list read the
-- tenant's sessions newest first and kept those whose derived status matched: for a status no recent
-- session had, every request looked at 10,000 sessions (the scan's bound) and returned a short page. An
-- ended session's status does not move with time or liveness (`completed` and `failed` take no overlay;
-- only a new input starts a new run, and that input rewrites this column), so the list now asks the
-- database only for sessions that can match: open ones (`ended IS NULL`) and those ended as asked. The
-- status is still derived for each of them; a NULL is "may be open", never a wrong answer.
--
-- The partial index holds the sessions that are not completed — open and failed, a small part of a
-- tenant's history — by recency, so a filter for open or failed statuses walks only them.
ALTER TABLE sessions ADD COLUMN ended text CHECK (ended IN ('completed', 'failed'));

-- Existing trackers: the current run is the last lifecycle input of the re-order window (`pending`,
-- sorted as it is folded; a `step` changes nothing), else the settled one; the status is completed or
-- failed exactly when that run is (shared-schema/src/status/health.rs, `derive`). Sessions without a
-- tracker stay NULL until their next batch rebuilds it: read as possibly open.
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

CREATE INDEX sessions_not_completed_recent
    ON sessions (tenant_id, (COALESCE(last_event_at, first_seen_at)), session_id)
    WHERE ended IS DISTINCT FROM 'completed';
