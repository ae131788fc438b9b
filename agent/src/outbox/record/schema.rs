//! The outbox's SQLite schema and its migrations.
//!
//! Migrations are numbered from 1; `PRAGMA user_version` holds the last one applied. Each runs in its
//! own transaction together with the `user_version` bump, so a crash mid-migration leaves the previous
//! version intact. A database newer than this build refuses to open (downgrades are not supported).
//!
//! ## Tables (version 1)
//! - `events`: one row per distinct `event_id` ever committed (within the dedup retention). `state` 0 is
//!   pending (the row holds the redacted canonical JSON in `body`); any other state is terminal and the
//!   row is a *tombstone* (`body` NULL) kept only so that a second copy is recognised as a duplicate.
//!   `held` = 1 marks an event captured while sync was off (never uploaded unless the backlog is
//!   included).
//!
//!   Dedup is on `(occurred_at, event_id)` (the unique index `events_dedup` until version 12, then the
//!   tables `dedup_keys`/`dedup_recent`, see below), not `event_id` alone: event ids are UUID v5
//!   (random order), and a B-tree keyed by them alone gets its pages touched all over at every commit —
//!   measured, 3.6× slower inserts and ~1.7 KiB of WAL per event at 1M rows. Keyed by time first, inserts
//!   land at the end. A native event always maps to the same `occurred_at` (its raw timestamp under the
//!   configured zone), so this dedups the same copies; the one exception, a log re-read after `zone` was
//!   changed, passes local dedup and is caught by the ingest's dedup on `(tenant, event_id)`. Settling
//!   reaches rows by `seq` through the in-memory claim map, so nothing needs an `event_id` index. `attempts`, `next_attempt_at`, `last_error` are the persisted retry state of the push loop.
//! - `counters`: persisted outcome counters (`received`, `delivered`, ...; see [`crate::outbox::Counters`])
//!   and informational ones (`filtered.<reason>`, `refused`, `drops_unreported.<reason>`).
//! - `usage`: local per-(session, model) totals, updated in the same transaction as the events, so
//!   `GET /v1/usage/sessions/{id}` keeps working after rows are delivered and their bodies dropped.
//!   Integers since version 4 (`cost_nanos`, `credits_micros`): sums of the shared
//!   `apiary_schema::usage` contributions, exact like the ingest's rollups.
//! - `sessions`: the session registry (identity bound when a session is first seen or registered).
//! - `session_health`, `status_transitions` (version 3): each session's health tracker and status history
//!   (the shared health model, see [`super::health`]), updated in the same transaction as the events.
//! - `session_work` (version 5): each session's work (tasks, triggers, tool calls: the shared
//!   `apiary_schema::work` fold, see [`super::work`]), updated in the same transaction as the events.
//! - `stream_log`, `stream_usage` (version 6): the local live stream (`GET /v1/stream`, see
//!   [`super::live`]) and when each session's usage totals were last streamed.
//! - `tool_starts` (version 7): the open tool-call starts the duration pairing waits on (see
//!   [`crate::outbox::write::durations`]), written in the transaction of the start event, so a call's start
//!   survives a crash before its completion; and `usage.tool_duration_ms`, the summed durations of completed
//!   calls.
//! - `sync_state` (one row) and `consent_log` (history): sync on/off, endpoint, token file, consent
//!   time and the policy hash consented to.
//! - `dead_letters`: why an event (or an unreadable line) was rejected; holds at most the already
//!   redacted canonical event, never raw input.
//! - `checkpoints`: the log tailer's per-file read positions (committed with the events read).
//! - `policies`: the policy hashes events were redacted under (`events.policy_id` references one).
//! - `meta`: key/value (device id, last push result).
//! - `quota` (version 8, one row): the last budget state the ingest sent in a batch answer and when it
//!   arrived (see [`crate::outbox::read::quota`]), shown by `GET /v1/quota`, `status` and the settings page.
//! - `usage_by_time` (version 9): local usage sums per quarter-hour of event time, for "today" and "this
//!   month" in any zone (see [`super::usage_time`]); `sent_events` (version 9): the last
//!   [`crate::outbox::read::sent::SENT_KEPT`] events the ingest acked, their redacted JSON as sent (see
//!   [`crate::outbox::read::sent`]).
//! - `session_health` and `session_work` are rowid tables since version 10 (their rows are too large
//!   for a WITHOUT ROWID leaf); `fold_journal` (version 11): what each group pushed into those folds,
//!   replayed on top of them until compacted (see [`super::journal`]).
//! - `dedup_keys`, `dedup_recent` (version 12) replace the unique index `events_dedup`: the events' dedup
//!   keys `(occurred_at, event_id)`, one row per `events` row, in exactly one of the two tables. A new
//!   event's key goes into the small `dedup_recent` (after a lookup in `dedup_keys`); at the end of a group
//!   in which `dedup_recent` holds [`crate::outbox::write::store::DEDUP_MERGE_AT`] keys or more, they move
//!   into `dedup_keys` in key order ([`crate::outbox::write::store::merge_dedup_keys`]). Why: a backfill's
//!   times jump back and forth, and with one index every event dirtied a leaf of its own in every commit (the
//!   WAL wrote ≈ 10 KB per event); now a group dirties the small table's leaves, and the big index's leaves
//!   are written once per merge. The trigger `events_forget` removes a key with its row (eviction, tombstone
//!   pruning), so dedup forgets exactly what it forgot with the index.

use rusqlite::{Connection, Transaction};

/// One migration: SQL, or code for what SQL cannot do exactly.
enum Migration {
    Sql(&'static str),
    Code(fn(&Transaction<'_>) -> rusqlite::Result<()>),
}
use Migration::{Code, Sql};

/// Every migration, in order; index + 1 is its version.
const MIGRATIONS: &[Migration] = &[
    Sql(r#"
CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id        BLOB    NOT NULL,
    state           INTEGER NOT NULL DEFAULT 0,
    held            INTEGER NOT NULL DEFAULT 0,
    kind            TEXT    NOT NULL,
    session_id      TEXT,
    occurred_at     INTEGER NOT NULL,
    received_at     INTEGER NOT NULL,
    policy_id       INTEGER NOT NULL,
    bytes           INTEGER NOT NULL,
    body            TEXT,
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL DEFAULT 0,
    last_error      TEXT,
    done_at         INTEGER
);
CREATE UNIQUE INDEX events_dedup ON events(occurred_at, event_id);
CREATE INDEX events_pending ON events(seq) WHERE state = 0;
CREATE INDEX events_uploadable ON events(seq) WHERE state = 0 AND held = 0;
CREATE INDEX events_tombstones ON events(seq) WHERE state <> 0;

CREATE TABLE counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;

CREATE TABLE usage (
    session_id            TEXT    NOT NULL,
    model                 TEXT    NOT NULL,
    parent_session_id     TEXT,
    llm_calls             INTEGER NOT NULL DEFAULT 0,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cached_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd              REAL    NOT NULL DEFAULT 0,
    unpriced_turns        INTEGER NOT NULL DEFAULT 0,
    credits               REAL    NOT NULL DEFAULT 0,
    tool_calls_started    INTEGER NOT NULL DEFAULT 0,
    tool_calls            INTEGER NOT NULL DEFAULT 0,
    tool_errors           INTEGER NOT NULL DEFAULT 0,
    events                INTEGER NOT NULL DEFAULT 0,
    first_at              INTEGER,
    last_at               INTEGER,
    PRIMARY KEY (session_id, model)
) WITHOUT ROWID;
CREATE INDEX usage_parent ON usage(parent_session_id);

CREATE TABLE sessions (
    session_id        TEXT PRIMARY KEY,
    user_id           TEXT,
    tenant_id         TEXT,
    device_id         TEXT,
    parent_session_id TEXT,
    first_seen_at     INTEGER NOT NULL,
    registered        INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;

CREATE TABLE sync_state (
    id              INTEGER PRIMARY KEY CHECK (id = 1),
    enabled         INTEGER NOT NULL DEFAULT 0,
    endpoint        TEXT,
    token_file      TEXT,
    include_backlog INTEGER NOT NULL DEFAULT 0,
    policy_hash     TEXT,
    changed_at      INTEGER,
    paused_reason   TEXT
);
INSERT INTO sync_state (id, enabled) VALUES (1, 0);

CREATE TABLE consent_log (
    id              INTEGER PRIMARY KEY,
    at              INTEGER NOT NULL,
    action          TEXT    NOT NULL,
    policy_hash     TEXT    NOT NULL,
    endpoint        TEXT,
    include_backlog INTEGER NOT NULL DEFAULT 0,
    purged          INTEGER NOT NULL DEFAULT 0,
    released        INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE dead_letters (
    id        INTEGER PRIMARY KEY,
    at        INTEGER NOT NULL,
    event_id  BLOB,
    source    TEXT    NOT NULL,
    line_no   INTEGER,
    byte_offset INTEGER,
    reason    TEXT    NOT NULL,
    body      TEXT
);

CREATE TABLE checkpoints (
    source_key TEXT PRIMARY KEY,
    path       TEXT    NOT NULL,
    file_id    TEXT    NOT NULL,
    "offset"   INTEGER NOT NULL,
    head_hash  TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE policies (
    id            INTEGER PRIMARY KEY,
    hash          TEXT NOT NULL UNIQUE,
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    first_used_at INTEGER NOT NULL
);

CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
"#),
    // 2: held rows (captured while sync was off) have an index of their own, so `status` counts them
    // instead of counting every uploadable row (uploadable = pending counter − held). Usually empty or small.
    Sql(r#"
CREATE INDEX events_held ON events(seq) WHERE state = 0 AND held = 1;
"#),
    // 3: local session status (see `health`): each session's health tracker (JSON) and its status
    // transitions, written in the same transaction as the events they come from.
    Sql(r#"
CREATE TABLE session_health (
    session_id TEXT PRIMARY KEY,
    tracker    TEXT NOT NULL
) WITHOUT ROWID;
CREATE TABLE status_transitions (
    session_id  TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    at          INTEGER NOT NULL, -- Unix microseconds (the ingest's precision)
    from_status TEXT,
    to_status   TEXT    NOT NULL,
    cause       TEXT    NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
"#),
    // 4: local usage in integers, like the ingest's rollups: `cost_usd` (REAL) becomes `cost_nanos`,
    // `credits` (REAL) becomes `credits_micros`, each stored sum converted by the shared decimal rule.
    Code(usage_in_integers),
    // 5: what each session is working on (see `work`): the shared fold of its tasks, triggers and tool
    // calls (JSON), written in the same transaction as the events it comes from.
    Sql(r#"
CREATE TABLE session_work (
    session_id TEXT PRIMARY KEY,
    work       TEXT NOT NULL
) WITHOUT ROWID;
"#),
    // 6: the local live stream (see `live`): every status transition and (at most once a second per
    // session) usage totals, in commit order, written in the transaction that caused them; positions
    // are `id`s (AUTOINCREMENT: never reused, also after pruning) under a random epoch per outbox file.
    Sql(r#"
CREATE TABLE stream_log (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    kind       TEXT    NOT NULL,
    session_id TEXT    NOT NULL,
    data       TEXT    NOT NULL,
    written_at INTEGER NOT NULL
);
CREATE TABLE stream_usage (
    session_id TEXT    PRIMARY KEY,
    sent_at    INTEGER NOT NULL,
    due        INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX stream_usage_due ON stream_usage(sent_at) WHERE due = 1;
INSERT INTO meta (key, value) VALUES ('stream_epoch', lower(hex(randomblob(4))));
"#),
    // 7: tool-call durations (see `durations`): the open starts (one per session and pairing key; event
    // time in Unix microseconds, recorded_at in Unix ms for expiry), and the local usage's summed
    // durations of completed calls.
    Sql(r#"
CREATE TABLE tool_starts (
    session_id  TEXT    NOT NULL,
    call_key    TEXT    NOT NULL,
    started_at  INTEGER NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (session_id, call_key)
) WITHOUT ROWID;
ALTER TABLE usage ADD COLUMN tool_duration_ms INTEGER NOT NULL DEFAULT 0;
"#),
    // 8: the last budget state the ingest sent (see `quota`): one row, the ingest's `Quota` as JSON and
    // when it arrived (Unix ms), replaced by each newer one.
    Sql(r#"
CREATE TABLE quota (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    body        TEXT    NOT NULL,
    received_at INTEGER NOT NULL
);
"#),
    // 9: for the settings page: local usage by quarter-hour of event time (see `usage_time`), written
    // with the events; and the ring of the last events the ingest acked, their redacted JSON as sent
    // (see `sent`), written by the ack that turns them into tombstones.
    Sql(r#"
CREATE TABLE usage_by_time (
    bucket                INTEGER PRIMARY KEY, -- Unix ms of the quarter-hour (UTC) the events occurred in
    events                INTEGER NOT NULL DEFAULT 0,
    llm_calls             INTEGER NOT NULL DEFAULT 0,
    input_tokens          INTEGER NOT NULL DEFAULT 0,
    output_tokens         INTEGER NOT NULL DEFAULT 0,
    cached_tokens         INTEGER NOT NULL DEFAULT 0,
    cache_creation_tokens INTEGER NOT NULL DEFAULT 0,
    cost_nanos            INTEGER NOT NULL DEFAULT 0,
    unpriced_turns        INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE sent_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    BLOB    NOT NULL,
    kind        TEXT    NOT NULL,
    occurred_at INTEGER NOT NULL, -- Unix ms
    sent_at     INTEGER NOT NULL, -- Unix ms of the ack
    duplicate   INTEGER NOT NULL, -- 1: the ingest answered that it already had it
    body        TEXT    NOT NULL  -- the redacted canonical event, as sent
);
"#),
    // 10: `session_health` and `session_work` become rowid tables. Their rows (a tracker holds up to
    // 32 pending inputs: 1-5 KiB of JSON) are larger than a WITHOUT ROWID leaf keeps inline (about
    // 1 KiB on 4 KiB pages), so every update of one rewrote a chain of overflow pages; in a rowid table
    // the row stays in its leaf page. Measured on a backfill of interleaved sessions, where each group
    // commit rewrites one row of each per event (see docs/performance.md).
    Sql(r#"
CREATE TABLE session_health_v10 (
    session_id TEXT PRIMARY KEY,
    tracker    TEXT NOT NULL
);
INSERT INTO session_health_v10 (session_id, tracker) SELECT session_id, tracker FROM session_health;
DROP TABLE session_health;
ALTER TABLE session_health_v10 RENAME TO session_health;
CREATE TABLE session_work_v10 (
    session_id TEXT PRIMARY KEY,
    work       TEXT NOT NULL
);
INSERT INTO session_work_v10 (session_id, work) SELECT session_id, work FROM session_work;
DROP TABLE session_work;
ALTER TABLE session_work_v10 RENAME TO session_work;
"#),
    // 11: the fold journal (see `journal`): per group and session, the health inputs and work facts the
    // group pushed (JSON arrays), replayed on top of `session_health` / `session_work` until compacted.
    Sql(r#"
CREATE TABLE fold_journal (
    seq        INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    health     TEXT,
    work       TEXT
);
CREATE INDEX fold_journal_session ON fold_journal(session_id, seq);
"#),
    Sql(r#"
CREATE TABLE dedup_keys (
    occurred_at INTEGER NOT NULL,
    event_id    BLOB    NOT NULL,
    PRIMARY KEY (occurred_at, event_id)
) WITHOUT ROWID;
CREATE TABLE dedup_recent (
    occurred_at INTEGER NOT NULL,
    event_id    BLOB    NOT NULL,
    PRIMARY KEY (occurred_at, event_id)
) WITHOUT ROWID;
INSERT INTO dedup_keys SELECT occurred_at, event_id FROM events ORDER BY occurred_at, event_id;
DROP INDEX events_dedup;
CREATE TRIGGER events_forget AFTER DELETE ON events BEGIN
    DELETE FROM dedup_recent WHERE occurred_at = OLD.occurred_at AND event_id = OLD.event_id;
    DELETE FROM dedup_keys WHERE occurred_at = OLD.occurred_at AND event_id = OLD.event_id;
END;
"#),
];

/// Migration 4 (see [`MIGRATIONS`]). A stored sum too large for an i64 (not reachable by real usage)
/// saturates rather than failing the upgrade.
fn usage_in_integers(tx: &Transaction<'_>) -> rusqlite::Result<()> {
    tx.execute_batch(
        "ALTER TABLE usage ADD COLUMN cost_nanos INTEGER NOT NULL DEFAULT 0;
         ALTER TABLE usage ADD COLUMN credits_micros INTEGER NOT NULL DEFAULT 0;",
    )?;
    let rows: Vec<(String, String, f64, f64)> = tx
        .prepare("SELECT session_id, model, cost_usd, credits FROM usage")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut update = tx.prepare(
        "UPDATE usage SET cost_nanos = ?3, credits_micros = ?4 WHERE session_id = ?1 AND model = ?2",
    )?;
    let exact = |x: f64, decimals| {
        apiary_schema::usage::decimal_units(x, decimals).unwrap_or(if x < 0.0 {
            i64::MIN
        } else {
            i64::MAX
        })
    };
    for (session, model, cost, credits) in rows {
        update.execute(rusqlite::params![
            session,
            model,
            exact(cost, 9),
            exact(credits, 6)
        ])?;
    }
    tx.execute_batch(
        "ALTER TABLE usage DROP COLUMN cost_usd;
         ALTER TABLE usage DROP COLUMN credits;",
    )
}

/// The schema version this build writes.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the database to [`SCHEMA_VERSION`]. Returns the version it found.
pub fn migrate(conn: &mut Connection) -> Result<i64, MigrateError> {
    let found: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::TooNew {
            found,
            supported: SCHEMA_VERSION,
        });
    }
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = i as i64 + 1;
        // IMMEDIATE: another process (a running agent, a CLI command) may write meanwhile; a deferred
        // transaction could not turn its read into a write (SQLITE_BUSY_SNAPSHOT).
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        try_apply(&tx, migration, version)?;
        tx.commit()?;
        tracing::info!(version, "outbox schema migrated");
    }
    Ok(found)
}

fn try_apply(tx: &Transaction<'_>, migration: &Migration, version: i64) -> rusqlite::Result<()> {
    match migration {
        Sql(sql) => tx.execute_batch(sql)?,
        Code(apply) => apply(tx)?,
    }
    tx.pragma_update(None, "user_version", version)
}

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    #[error("the outbox was written by a newer agent (schema {found}, this build knows {supported}); upgrade the agent")]
    TooNew { found: i64, supported: i64 },
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An in-memory database with the first `version` migrations applied.
    fn at_version(version: usize) -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        for (i, m) in MIGRATIONS.iter().enumerate().take(version) {
            let tx = conn.transaction().unwrap();
            try_apply(&tx, m, i as i64 + 1).unwrap();
            tx.commit().unwrap();
        }
        conn
    }

    #[test]
    fn migrations_apply_once_and_record_the_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), 0);
        assert_eq!(migrate(&mut conn).unwrap(), SCHEMA_VERSION);
        let v: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, SCHEMA_VERSION);
    }

    #[test]
    fn version_4_converts_stored_usage_sums_to_exact_integers() {
        let mut conn = at_version(3);
        // Ten turns of 0.1 USD summed as f64 by an agent before version 4.
        let drifted: f64 = (0..10).map(|_| 0.1).sum();
        conn.execute(
            "INSERT INTO usage (session_id, model, cost_usd, credits, llm_calls) VALUES ('s', 'm', ?1, 0.42, 10)",
            [drifted],
        )
        .unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), 3);
        let row: (i64, i64, i64) = conn
            .query_row(
                "SELECT cost_nanos, credits_micros, llm_calls FROM usage",
                [],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        assert_eq!(row, (1_000_000_000, 420_000, 10));
        let old = conn.prepare("SELECT cost_usd FROM usage");
        assert!(old.is_err(), "the REAL column is gone");
    }

    #[test]
    fn version_12_moves_the_dedup_keys_out_of_the_index_and_forgets_them_with_their_rows() {
        let mut conn = at_version(11);
        for (id, at) in [(1u8, 30i64), (2, 10), (3, 20)] {
            conn.execute(
                "INSERT INTO events (event_id, kind, occurred_at, received_at, policy_id, bytes)
                 VALUES (?1, 'k', ?2, 0, 1, 0)",
                rusqlite::params![vec![id; 16], at],
            )
            .unwrap();
        }
        assert_eq!(migrate(&mut conn).unwrap(), 11);
        let keys = |conn: &Connection, table: &str| -> Vec<i64> {
            conn.prepare(&format!("SELECT occurred_at FROM {table}"))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap()
        };
        assert_eq!(keys(&conn, "dedup_keys"), vec![10, 20, 30]);
        let index_left = conn
            .prepare("SELECT 1 FROM sqlite_master WHERE name = 'events_dedup'")
            .unwrap()
            .exists([])
            .unwrap();
        assert!(!index_left, "the unique index is gone");
        conn.execute("INSERT INTO dedup_recent VALUES (40, ?1)", [vec![4u8; 16]])
            .unwrap();
        conn.execute(
            "INSERT INTO events (event_id, kind, occurred_at, received_at, policy_id, bytes)
             VALUES (?1, 'k', 40, 0, 1, 0)",
            [vec![4u8; 16]],
        )
        .unwrap();
        conn.execute("DELETE FROM events WHERE occurred_at IN (20, 40)", [])
            .unwrap();
        assert_eq!(keys(&conn, "dedup_keys"), vec![10, 30]);
        assert!(keys(&conn, "dedup_recent").is_empty());
    }

    #[test]
    fn a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(MigrateError::TooNew { .. })
        ));
    }
}
