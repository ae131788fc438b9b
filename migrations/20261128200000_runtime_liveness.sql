-- Issue 13 (item 6): runtime liveness from the agents' heartbeats.
--
-- The agent reports, in each heartbeat, whether the runtime process behind each session it saw open
-- recently is alive (Hive's per-session state.json names the owning process). runtime_gone_at is when
-- the agent first found that process gone (NULL while alive or never reported); the session reads
-- `crashed` (cause runtime_gone) while it is set and no event of the session is later than it.
-- runtime_evidence is the agent's evidence word (pid_running, pid_exited, pid_reused, hive_marked_stale).
-- Only the session's own device can set them (see ingest/src/store/runtime.rs).
ALTER TABLE sessions ADD COLUMN runtime_gone_at timestamptz,
    ADD COLUMN runtime_evidence text;
