//! The local live stream's log (`stream_log`, migration 6): what `GET /v1/stream` on the agent sends,
//! written by the writer in the transaction that caused it, so a rolled-back group streams nothing and
//! the log's order is the commit order.
//!
//! - `status`: every status transition the health fold stores ([`status`], called from
//!   [`super::health::flush`]), the data the ingest streams: `{session_id, seq, at, from, to, cause}`.
//! - `usage`: a session's usage totals after the change (the ingest's `usage` event,
//!   [`StreamUsage`]: the sums of `/v1/usage`, with the session's active time at the time of the
//!   change), at most once a second per session: a group within a second of the session's last usage
//!   row marks it due in `stream_usage`; [`flush`] writes due rows once their second is up (the writer
//!   wakes for that while any is due).
//! - Positions: `<epoch>-<id>`. `id` is the row's AUTOINCREMENT key (never reused); `epoch` is random per
//!   outbox file (`meta.stream_epoch`), so a position from another file (a wiped data directory) is
//!   recognised. Rows older than [`RETENTION_MS`], or beyond the newest [`MAX_ROWS`], are pruned;
//!   `meta.stream_pruned_through` is the last pruned id. A position that is pruned, ahead of the log or
//!   of another epoch gets `reset` (see [`start`]).

use std::collections::HashMap;

use chrono::DateTime;
use rusqlite::{params, Connection, OptionalExtension};

use apiary_schema::status::{view, Durations, Liveness, Rules, StreamStatus, Tracker, Transition};
use apiary_schema::usage::StreamUsage;

/// Rows are kept this long (24 hours, like the ingest's stream).
pub const RETENTION_MS: i64 = 24 * 3_600_000;
/// And at most this many.
pub const MAX_ROWS: i64 = 100_000;
/// Usage totals of one session are streamed at most this often.
pub const USAGE_EVERY_MS: i64 = 1000;

/// Appends a status transition of `session`.
pub(crate) fn status(
    conn: &Connection,
    session: &str,
    t: &Transition,
    now_ms: i64,
) -> rusqlite::Result<()> {
    let data =
        serde_json::to_string(&StreamStatus::of(session, t)).expect("a status event serialises");
    append(conn, "status", session, &data, now_ms)
}

fn append(
    conn: &Connection,
    kind: &str,
    session: &str,
    data: &str,
    now_ms: i64,
) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT INTO stream_log (kind, session_id, data, written_at) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![kind, session, data, now_ms])?;
    Ok(())
}

/// Streams the usage of `touched` sessions (after the group's usage was written): now when the
/// session's last usage row is a second old, else marked due; then writes the due rows whose second is
/// up. `trackers` are the health trackers the group wrote (a session not among them is read from the
/// outbox). Returns whether some are still due (the writer wakes for them).
pub(crate) fn flush<'a>(
    conn: &Connection,
    touched: impl IntoIterator<Item = &'a str>,
    trackers: &HashMap<String, Tracker>,
    now_ms: i64,
) -> rusqlite::Result<bool> {
    for session in touched {
        let sent: Option<i64> = conn
            .prepare_cached("SELECT sent_at FROM stream_usage WHERE session_id = ?1")?
            .query_row([session], |r| r.get(0))
            .optional()?;
        match sent {
            Some(at) if now_ms - at < USAGE_EVERY_MS => {
                conn.prepare_cached("UPDATE stream_usage SET due = 1 WHERE session_id = ?1")?
                    .execute([session])?;
            }
            _ => usage(conn, session, trackers, now_ms)?,
        }
    }
    let due: Vec<String> = conn
        .prepare_cached(
            "SELECT session_id FROM stream_usage WHERE due = 1 AND sent_at <= ?1 ORDER BY sent_at",
        )?
        .query_map([now_ms - USAGE_EVERY_MS], |r| r.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    for session in &due {
        usage(conn, session, trackers, now_ms)?;
    }
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM stream_usage WHERE due = 1)")?
        .query_row([], |r| r.get(0))
}

/// Appends `session`'s usage totals and records the time.
fn usage(
    conn: &Connection,
    session: &str,
    trackers: &HashMap<String, Tracker>,
    now_ms: i64,
) -> rusqlite::Result<()> {
    let active_seconds = active_seconds(conn, session, trackers, now_ms)?;
    let data = conn
        .prepare_cached(
            "SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens), 0),
                coalesce(sum(cached_tokens), 0), coalesce(sum(cache_creation_tokens), 0),
                coalesce(sum(cost_nanos), 0), coalesce(sum(unpriced_turns), 0),
                coalesce(sum(llm_calls), 0), coalesce(sum(tool_calls), 0),
                coalesce(sum(tool_errors), 0), coalesce(sum(events), 0),
                coalesce(sum(tool_duration_ms), 0)
             FROM usage WHERE session_id = ?1",
        )?
        .query_row([session], |r| {
            let n = |i: usize| r.get::<_, i64>(i);
            // The device's costs are the runtimes' own: reported, never estimated here.
            Ok(StreamUsage {
                session_id: session.to_string(),
                input_tokens: n(0)?,
                output_tokens: n(1)?,
                cached_tokens: n(2)?,
                cache_creation_tokens: n(3)?,
                cost_nanos: n(4)?,
                cost_usd: n(4)? as f64 / 1e9,
                unpriced_turns: n(5)?,
                cost_reported_nanos: n(4)?,
                cost_estimated_nanos: 0,
                estimated_turns: 0,
                llm_calls: n(6)?,
                tool_calls: n(7)?,
                tool_errors: n(8)?,
                tool_duration_ms: n(10)?,
                events: n(9)?,
                active_seconds,
            })
        })?;
    let data = serde_json::to_string(&data)
        .map_err(|e| rusqlite::Error::ToSqlConversionFailure(e.into()))?;
    append(conn, "usage", session, &data, now_ms)?;
    conn.prepare_cached(
        "INSERT INTO stream_usage (session_id, sent_at, due) VALUES (?1, ?2, 0)
         ON CONFLICT(session_id) DO UPDATE SET sent_at = ?2, due = 0",
    )?
    .execute(params![session, now_ms])?;
    Ok(())
}

/// `session`'s time in status `active` at `now_ms` (the shared rule, as the session listing reads it
/// without the runtime overlay): from the tracker the group wrote, else the stored one.
fn active_seconds(
    conn: &Connection,
    session: &str,
    trackers: &HashMap<String, Tracker>,
    now_ms: i64,
) -> rusqlite::Result<f64> {
    let stored;
    let tracker = match trackers.get(session) {
        Some(t) => t,
        None => match super::journal::tracker(conn, session)? {
            Some(t) => {
                stored = t;
                &stored
            }
            None => return Ok(0.0),
        },
    };
    let now = DateTime::from_timestamp_millis(now_ms).unwrap_or_default();
    let rules = Rules::default();
    let health = tracker.current(&rules);
    let v = view(&health, now, &Liveness::local(now), &rules);
    Ok(Durations::of(&health, &v, now).active_seconds)
}

/// Drops rows past the retention or the row cap; returns how many.
pub(crate) fn prune(conn: &Connection, now_ms: i64) -> rusqlite::Result<usize> {
    let head: i64 = conn.query_row("SELECT coalesce(max(id), 0) FROM stream_log", [], |r| {
        r.get(0)
    })?;
    let last: Option<i64> = conn.query_row(
        "SELECT max(id) FROM stream_log WHERE written_at < ?1 OR id <= ?2",
        params![now_ms - RETENTION_MS, head - MAX_ROWS],
        |r| r.get(0),
    )?;
    let Some(last) = last else {
        return Ok(0);
    };
    let n = conn.execute("DELETE FROM stream_log WHERE id <= ?1", [last])?;
    super::meta::set_meta(conn, "stream_pruned_through", &last.to_string())?;
    Ok(n)
}

/// A stream position: this outbox's epoch and a row id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    pub epoch: String,
    pub id: i64,
}

impl Position {
    /// Parses `<epoch>-<id>` (an epoch of hex digits, a non-negative id).
    pub fn parse(s: &str) -> Option<Position> {
        let (epoch, id) = s.trim().split_once('-')?;
        let hex =
            !epoch.is_empty() && epoch.len() <= 16 && epoch.bytes().all(|b| b.is_ascii_hexdigit());
        let digits = !id.is_empty() && id.len() <= 18 && id.bytes().all(|b| b.is_ascii_digit());
        if !(hex && digits) {
            return None;
        }
        Some(Position {
            epoch: epoch.to_ascii_lowercase(),
            id: id.parse().ok()?,
        })
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.epoch, self.id)
    }
}

/// Where a stream starts: after the position asked for (`ready`), or at the head because it cannot
/// (`reset`: pruned, ahead of the log, another outbox's, or no position asked and nothing to resume —
/// then it is `ready` at the head).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    Ready(Position),
    Reset(Position),
}

/// Where a stream asking to resume after `asked` starts.
pub fn start(conn: &Connection, asked: Option<&Position>) -> rusqlite::Result<Start> {
    let epoch = super::meta::get_meta(conn, "stream_epoch")?.unwrap_or_default();
    let pruned: i64 = super::meta::get_meta(conn, "stream_pruned_through")?
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    // The sequence's high-water mark: the last id ever given, also when those rows are pruned.
    let head: i64 = conn
        .query_row(
            "SELECT seq FROM sqlite_sequence WHERE name = 'stream_log'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0);
    let at_head = Position {
        epoch: epoch.clone(),
        id: head,
    };
    Ok(match asked {
        None => Start::Ready(at_head),
        Some(p) if p.epoch == epoch && p.id <= head && p.id >= pruned => Start::Ready(p.clone()),
        Some(_) => Start::Reset(at_head),
    })
}

/// One row of the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveRow {
    pub id: i64,
    pub kind: String,
    pub data: String,
}

/// Rows after `after`, oldest first, at most `limit`.
pub fn after(conn: &Connection, after: i64, limit: i64) -> rusqlite::Result<Vec<LiveRow>> {
    conn.prepare_cached("SELECT id, kind, data FROM stream_log WHERE id > ?1 ORDER BY id LIMIT ?2")?
        .query_map(params![after, limit], |r| {
            Ok(LiveRow {
                id: r.get(0)?,
                kind: r.get(1)?,
                data: r.get(2)?,
            })
        })?
        .collect()
}
