-- A user's sessions, most recently active first: the session list filtered by user, and every list a
-- user-bound token reads. Without it such a list walked the tenant's sessions newest first (`sessions_recent`)
-- until a page of that user's was found: 12,786 buffers for a user among 150,000 sessions, 56 with it.
CREATE INDEX sessions_user_recent ON sessions (tenant_id, user_id, (COALESCE(last_event_at, first_seen_at)), session_id);
