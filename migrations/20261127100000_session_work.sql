-- Issue 13 (items 3 and 5): what a session is working on.
--
-- sessions.work holds apiary_schema::work::Work as JSON: the session's tasks (ids, states, first and last
-- event times; at most 500, the greatest ids), its triggers (type, state, last and next fire time) and the
-- tool calls it started (at most 32 remembered), folded by every batch from its new task.changed,
-- trigger.changed, tool.call and lifecycle events, in the batch's transaction under the session row's
-- lock. Never any subject, description, trigger payload or tool input: the policy drops them on the device.
-- NULL on rows stored before this migration: the first batch that touches such a session folds its stored
-- events once (like sessions.health).
ALTER TABLE sessions ADD COLUMN work jsonb;
