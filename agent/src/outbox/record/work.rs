//! Local session work: the shared fold ([`apiary_schema::work`]) of each session's tasks, triggers and
//! tool calls, kept per session in `session_work` so the desktop sees them with sync off or air-gapped.
//!
//! Every group commit folds its new events (never duplicates: only events the commit inserted reach the
//! delta) into each session's [`Work`] and journals the facts in the group's transaction (the stored
//! row is written back at the journal's compaction, see [`super::journal`]). The fold is order-independent
//! and idempotent, so the agent and the ingest agree whatever order each received the events in.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::work::{OwnedFact, Work};
use rusqlite::Connection;

/// Folds a group's new facts (per session) into the stored work.
/// `cache` and `written` as for [`super::health::flush`].
pub(crate) fn flush<F: std::borrow::Borrow<OwnedFact>>(
    conn: &Connection,
    facts: &BTreeMap<String, Vec<F>>,
    cache: &mut HashMap<String, (u64, Work)>,
    written: &mut HashMap<String, Work>,
) -> rusqlite::Result<()> {
    for (session, new) in facts {
        let mut work = match cache.remove(session) {
            Some((_, w)) => w,
            None => load(conn, session)?.unwrap_or_default(),
        };
        for f in new {
            let f = f.borrow();
            work.fold_parts(&f.fact(), f.at);
        }
        written.insert(session.clone(), work);
    }
    Ok(())
}

/// A session's work (its stored row with the fold journal replayed), if any of its events was read by
/// the fold.
pub fn load(conn: &Connection, session: &str) -> rusqlite::Result<Option<Work>> {
    super::journal::work(conn, session)
}
