//! Local session work: the shared fold ([`apiary_schema::work`]) of each session's tasks, triggers and
//! tool calls, kept per session in `session_work` so the desktop sees them with sync off or air-gapped.
//!
//! Every group commit folds its new events (never duplicates: only events the commit inserted reach the
//! delta) into each session's [`Work`] and journals the facts in the group's transaction (the stored
//! row is written back at the journal's compaction, see [`super::journal`]). The fold is order-independent
//! and idempotent, so the agent and the ingest agree whatever order each received the events in.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::work::{OwnedFact, Work};
use rusqlite::{params, Connection, OptionalExtension};

/// Folds a group's new facts (per session) into the stored work.
/// `cache` and `written` as for [`super::health::flush`].
pub(crate) fn flush(
    conn: &Connection,
    facts: &BTreeMap<String, Vec<OwnedFact>>,
    cache: &mut HashMap<String, (u64, Work)>,
    written: &mut HashMap<String, Work>,
) -> rusqlite::Result<()> {
    for (session, new) in facts {
        let mut work = match cache.remove(session) {
            Some((_, w)) => w,
            None => load(conn, session)?.unwrap_or_default(),
        };
        for f in new {
            work.fold_parts(&f.fact(), f.at);
        }
        written.insert(session.clone(), work);
    }
    Ok(())
}

/// A session's work (its stored row with the fold journal replayed), if any of its events was read by
/// the fold.
pub fn load(conn: &Connection, session: &str) -> rusqlite::Result<Option<Work>> {
    let json: Option<String> = conn
        .prepare_cached("SELECT work FROM session_work WHERE session_id = ?1")?
        .query_row([session], |r| r.get(0))
        .optional()?;
    let stored = json.map(|j| match serde_json::from_str(&j) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(session, error = %e, "unreadable session_work row; starting it over");
            Work::default()
        }
    });
    let had_row = stored.is_some();
    let mut work = stored.unwrap_or_default();
    let journaled = super::journal::replay_work(conn, session, &mut work)?;
    Ok((had_row || journaled).then_some(work))
}

/// Writes a session's work back (the fold journal's compaction).
pub(crate) fn store(conn: &Connection, session: &str, work: &Work) -> rusqlite::Result<()> {
    let json = serde_json::to_string(work).expect("a session's work serialises");
    conn.prepare_cached(
        "INSERT INTO session_work (session_id, work) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET work = ?2",
    )?
    .execute(params![session, json])?;
    Ok(())
}
