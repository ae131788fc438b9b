-- GET /v1/sessions lists a tenant's sessions, most recently active first, in keyset pages on
-- (COALESCE(last_event_at, first_seen_at), session_id). This index serves that order (scanned backwards)
-- and the optional `since` bound. It makes a session upsert that moves last_event_at a non-HOT update;
-- a batch touches a few dozen session rows, next to hundreds of event rows.
CREATE INDEX sessions_recent ON sessions (tenant_id, (COALESCE(last_event_at, first_seen_at)), session_id);
