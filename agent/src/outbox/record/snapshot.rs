//! The stored folds: one row per session in `session_health` (its status [`Tracker`]) and in
//! `session_work` (its [`Work`]), as of the fold journal's last compaction. A leaf: the journal
//! ([`super::journal`]) replays its rows on top of these and writes them back here when it compacts.

use apiary_schema::status::Tracker;
use apiary_schema::work::Work;
use rusqlite::{params, Connection, OptionalExtension};

/// A session's stored tracker, without the journal (None: no row).
pub(crate) fn tracker(conn: &Connection, session: &str) -> rusqlite::Result<Option<Tracker>> {
    let json: Option<String> = conn
        .prepare_cached("SELECT tracker FROM session_health WHERE session_id = ?1")?
        .query_row([session], |r| r.get(0))
        .optional()?;
    Ok(json.map(|j| match serde_json::from_str(&j) {
        Ok(t) => t,
        Err(e) => {
            tracing::warn!(session, error = %e, "unreadable session_health row; starting it over");
            Tracker::default()
        }
    }))
}

/// Writes a session's tracker back (the fold journal's compaction).
pub(crate) fn store_tracker(
    conn: &Connection,
    session: &str,
    tracker: &Tracker,
) -> rusqlite::Result<()> {
    let json = serde_json::to_string(tracker).expect("a tracker serialises");
    conn.prepare_cached(
        "INSERT INTO session_health (session_id, tracker) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET tracker = ?2",
    )?
    .execute(params![session, json])?;
    Ok(())
}

/// A session's stored work, without the journal (None: no row).
pub(crate) fn work(conn: &Connection, session: &str) -> rusqlite::Result<Option<Work>> {
    let json: Option<String> = conn
        .prepare_cached("SELECT work FROM session_work WHERE session_id = ?1")?
        .query_row([session], |r| r.get(0))
        .optional()?;
    Ok(json.map(|j| match serde_json::from_str(&j) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(session, error = %e, "unreadable session_work row; starting it over");
            Work::default()
        }
    }))
}

/// Writes a session's work back (the fold journal's compaction).
pub(crate) fn store_work(conn: &Connection, session: &str, work: &Work) -> rusqlite::Result<()> {
    let json = serde_json::to_string(work).expect("a session's work serialises");
    conn.prepare_cached(
        "INSERT INTO session_work (session_id, work) VALUES (?1, ?2)
         ON CONFLICT(session_id) DO UPDATE SET work = ?2",
    )?
    .execute(params![session, json])?;
    Ok(())
}
