-- Status v2: the health model's state per session and the history of status transitions.
--
-- sessions.health holds the session's tracker (apiary_schema::status::Tracker as JSON: the model's state
-- plus its re-order window), folded in event-time order by every batch in its transaction. stall_due_at
-- is when the no-progress rule fires if nothing else arrives (NULL when it cannot): the tenant-wide
-- transitions read finds quiet sessions through it instead of a clock-driven writer.
ALTER TABLE sessions ADD COLUMN health jsonb, ADD COLUMN stall_due_at timestamptz;
CREATE INDEX sessions_stall_due ON sessions (tenant_id, stall_due_at) WHERE stall_due_at IS NOT NULL;

-- Every status transition of a session: seq numbers a session's history from 0. A batch replaces the
-- transitions from the first one it recomputed (seq >= first), under the session row's lock, so replicas
-- never store one twice. Retained like events (rows older than the retention cut are deleted with the
-- partitions).
CREATE TABLE status_transitions (
    tenant_id    uuid        NOT NULL,
    session_id   text        NOT NULL,
    seq          bigint      NOT NULL,
    at           timestamptz NOT NULL,
    from_status  text,
    to_status    text        NOT NULL,
    cause        text        NOT NULL,
    PRIMARY KEY (tenant_id, session_id, seq)
);
CREATE INDEX status_transitions_at ON status_transitions (tenant_id, at);
