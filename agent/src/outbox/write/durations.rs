//! Tool-call durations, computed on the device: a `tool.call` completion gets `data.duration_ms` from
//! its start, paired in the writer's transaction, before the completion is written.
//!
//! ## The rule
//! - A start and a completion are one call's when they have the same session and pairing key
//!   ([`apiary_schema::work::call_key`], the rule the activity uses): `tool_use_id`, else execution +
//!   `tool_index` + tool name. A call known by its name alone is never timed (parallel calls of one tool
//!   cannot be told apart).
//! - A completion is timed by the latest start of its key at or before it — from the same submission
//!   (so a completion that comes before its start within one batch is still timed) or from the open
//!   starts kept in `tool_starts`. `duration_ms` = completion time − start time (event times, floored to
//!   whole milliseconds). No start at or before it (a completion without its start, or whose start comes
//!   in a later submission) → no duration: never a negative or made-up one.
//! - A completion that already carries `duration_ms` (the runtime measured it: OpenTelemetry spans,
//!   Claude Code's `tool_result`) keeps it. Hive reports none (`tool_call_completed` holds `tool_use_id`,
//!   `tool_name`, `result`, `is_error`), so its calls are timed here.
//! - Only when the policy in force lets `tool.call`'s `duration_ms` (a `count`) through: the field this
//!   adds is one the policy allows, and nothing else is added. A user policy that drops it disables
//!   the pairing.
//!
//! ## Open starts (`tool_starts`, one row per session + key)
//! - A new start (not a duplicate: a re-read copy adds nothing) is kept until a completion at or after
//!   it arrives; a later start of the same key replaces it (keys by index repeat across turns). The row
//!   is written in the transaction that commits the start event, so the pairing survives a crash or a
//!   `kill -9` between a call's start and its completion exactly like the events do.
//! - Bounded: a start never completed expires after [`START_TTL_MS`] (the writer's housekeeping), and
//!   at most [`MAX_OPEN_STARTS`] are kept (past that the oldest starts are dropped; their completions
//!   then get no duration).
//!
//! The writer applies a submission twice when its group is retried op by op; attaching is idempotent
//! (a timed completion is not timed again) and the table writes are undone with the group.

use std::collections::HashMap;

use apiary_schema::policy::{SimpleKind, ValueKind};
use apiary_schema::usage::MAX_DURATION_MS;
use apiary_schema::{CanonicalEvent, EventKind, Policy};
use rusqlite::{params, Connection, OptionalExtension};

use super::op::Ctx;
use crate::outbox::record::item::{Item, PreparedEvent, ToolEdge};

/// An open start is forgotten this long after it was recorded (24 hours).
pub const START_TTL_MS: i64 = 24 * 3_600_000;
/// At most this many open starts are kept.
pub const MAX_OPEN_STARTS: i64 = 10_000;

/// True when `policy` lets the duration this module attaches through (`tool.call`'s `duration_ms`, a
/// count).
pub fn policy_allows(policy: &Policy) -> bool {
    policy
        .fields(EventKind::ToolCall)
        .and_then(|f| f.get("duration_ms"))
        .is_some_and(|k| matches!(k, ValueKind::Simple(SimpleKind::Count)))
}

type Key = (String, String);

/// What [`attach`] learnt about a submission, for [`record`] once the events are inserted.
#[derive(Debug, Default)]
pub(crate) struct Pairing {
    /// The stored open start of each key the submission names (None: none stored).
    stored: HashMap<Key, Option<i64>>,
}

/// The stored open start of a key.
fn stored_start(conn: &Connection, key: &Key) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(
        "SELECT started_at FROM tool_starts WHERE session_id = ?1 AND call_key = ?2",
    )?
    .query_row(params![key.0, key.1], |r| r.get(0))
    .optional()
}

fn edges(items: &[Item]) -> impl Iterator<Item = (usize, &ToolEdge)> {
    items.iter().enumerate().filter_map(|(i, item)| match item {
        Item::Kept(e) => e.tool.as_deref().map(|t| (i, t)),
        _ => None,
    })
}

/// Times the submission's completions (see the module notes): each untimed completion gets the latest
/// start of its key at or before it, from this submission or the stored open starts.
pub(crate) fn attach(ctx: &Ctx<'_>, items: &mut [Item]) -> rusqlite::Result<Pairing> {
    let mut pairing = Pairing::default();
    if !ctx.state.attach_durations {
        return Ok(pairing);
    }
    let mut starts: HashMap<Key, Vec<i64>> = HashMap::new();
    let mut wanted = vec![];
    for (i, t) in edges(items) {
        let key = (t.session.clone(), t.key.clone());
        if !pairing.stored.contains_key(&key) {
            let s = stored_start(ctx.conn, &key)?;
            pairing.stored.insert(key.clone(), s);
        }
        if !t.completed {
            starts.entry(key).or_default().push(t.at_us);
        } else if !t.timed {
            wanted.push((i, key, t.at_us));
        }
    }
    for (i, key, at) in wanted {
        let batch = starts.get(&key).into_iter().flatten().copied();
        let start = batch
            .chain(pairing.stored.get(&key).copied().flatten())
            .filter(|s| *s <= at)
            .max();
        let Some(start) = start else { continue };
        let ms = (at - start) / 1000;
        if let (Item::Kept(e), true) = (&mut items[i], ms as u64 <= MAX_DURATION_MS) {
            set_duration(e, ms);
        }
    }
    Ok(pairing)
}

/// Writes `duration_ms` into the completion's body (and its local usage), and marks it timed.
fn set_duration(e: &mut PreparedEvent, ms: i64) {
    match e.tool.as_deref().and_then(|t| t.duration_slot) {
        Some(slot) => e.body = slot.insert(&e.body, ms),
        None => {
            let mut event: CanonicalEvent =
                serde_json::from_str(&e.body).expect("a prepared body is a canonical event");
            event.data.insert("duration_ms".into(), ms.into());
            e.body = serde_json::to_string(&event).expect("a canonical event serialises");
            e.body.shrink_to_fit();
        }
    }
    if let Some((_, u)) = e.usage.as_deref_mut() {
        u.tool_duration_ms += ms;
    }
    if let Some(t) = &mut e.tool {
        t.timed = true;
        t.duration_slot = None;
    }
}

/// Updates the open starts after the submission's events were inserted (`inserted[i]`: item `i` was a
/// new event, not a duplicate): per key, the latest start (stored, or new in this submission) stays
/// open unless a completion at or after it came in this submission.
pub(crate) fn record(
    ctx: &mut Ctx<'_>,
    items: &[Item],
    inserted: &[bool],
    pairing: Pairing,
) -> rusqlite::Result<()> {
    if !ctx.state.attach_durations {
        return Ok(());
    }
    let mut latest_new: HashMap<Key, i64> = HashMap::new();
    let mut last_done: HashMap<Key, i64> = HashMap::new();
    for (i, t) in edges(items) {
        let key = (t.session.clone(), t.key.clone());
        if t.completed {
            let d = last_done.entry(key).or_insert(t.at_us);
            *d = (*d).max(t.at_us);
        } else if inserted[i] {
            let s = latest_new.entry(key).or_insert(t.at_us);
            *s = (*s).max(t.at_us);
        }
    }
    let mut change = 0i64;
    for (key, stored) in pairing.stored {
        let new = latest_new.get(&key).copied();
        let Some(open) = stored.max(new) else {
            continue;
        };
        let done = last_done.get(&key).is_some_and(|d| *d >= open);
        if done {
            if stored.is_some() {
                ctx.conn
                    .prepare_cached(
                        "DELETE FROM tool_starts WHERE session_id = ?1 AND call_key = ?2",
                    )?
                    .execute(params![key.0, key.1])?;
                change -= 1;
            }
        } else if new.is_some_and(|n| Some(n) > stored) {
            ctx.conn
                .prepare_cached(
                    "INSERT INTO tool_starts (session_id, call_key, started_at, recorded_at)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT(session_id, call_key) DO UPDATE SET started_at = ?3, recorded_at = ?4",
                )?
                .execute(params![key.0, key.1, open, ctx.now_ms])?;
            change += i64::from(stored.is_none());
        }
    }
    ctx.delta.tool_starts += change;
    let over = ctx.state.open_tool_starts + ctx.delta.tool_starts - MAX_OPEN_STARTS;
    if over > 0 {
        ctx.delta.tool_starts -= evict_oldest(ctx.conn, over)?;
    }
    Ok(())
}

/// Drops the `n` oldest open starts; returns how many went.
fn evict_oldest(conn: &Connection, n: i64) -> rusqlite::Result<i64> {
    let gone = conn
        .prepare_cached(
            "DELETE FROM tool_starts WHERE (session_id, call_key) IN
                (SELECT session_id, call_key FROM tool_starts ORDER BY started_at, session_id, call_key LIMIT ?1)",
        )?
        .execute([n])?;
    tracing::warn!(
        dropped = gone,
        "too many tool calls without completion: the oldest starts are forgotten"
    );
    Ok(gone as i64)
}

/// Forgets the open starts recorded before `cutoff_ms`; returns how many are left.
pub(crate) fn expire(conn: &Connection, cutoff_ms: i64) -> rusqlite::Result<i64> {
    let gone = conn
        .prepare_cached("DELETE FROM tool_starts WHERE recorded_at < ?1")?
        .execute([cutoff_ms])?;
    if gone > 0 {
        tracing::info!(
            expired = gone,
            "tool calls started long ago and never completed are forgotten"
        );
    }
    count(conn)
}

/// How many open starts are stored.
pub(crate) fn count(conn: &Connection) -> rusqlite::Result<i64> {
    conn.query_row("SELECT count(*) FROM tool_starts", [], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        crate::outbox::record::schema::migrate(&mut conn).unwrap();
        for (i, recorded) in [(3, 100), (1, 300), (2, 200)] {
            conn.execute(
                "INSERT INTO tool_starts VALUES ('s', ?1, ?2, ?3)",
                params![format!("id:{i}"), i * 1_000, recorded],
            )
            .unwrap();
        }
        conn
    }

    fn keys(conn: &Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT call_key FROM tool_starts ORDER BY call_key")
            .unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    #[test]
    fn starts_recorded_before_the_cutoff_expire() {
        let conn = table();
        assert_eq!(expire(&conn, 200).unwrap(), 2);
        assert_eq!(keys(&conn), ["id:1", "id:2"]);
    }

    #[test]
    fn over_the_cap_the_earliest_starts_go_first() {
        let conn = table();
        assert_eq!(evict_oldest(&conn, 2).unwrap(), 2);
        assert_eq!(keys(&conn), ["id:3"]);
        assert_eq!(count(&conn).unwrap(), 1);
    }
}
