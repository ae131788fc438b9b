//! The fold journal: what each group pushed into its sessions' health trackers ([`super::health`]) and
//! work folds ([`super::work`]), appended in the group's transaction instead of rewriting every touched
//! session's fold there.
//!
//! A session's fold is its stored row (`session_health`, `session_work`) with its journal rows replayed
//! on top, in order: the same pushes, the same inputs, so the same tracker and work as if each group had
//! written its folds back (the tracker's push is deterministic; the work fold is order-independent and
//! idempotent). Every reader goes through [`super::health::load`], [`super::work::load`] or the
//! listing, which replay.
//!
//! Why: a tracker is 1-5 KiB of JSON and a work fold up to a few KiB. When events of thousands of
//! sessions arrive interleaved (a backfill, several runtimes at once), a group of 2,000 events touches
//! about 2,000 sessions, and writing their folds back rewrote 2,000+ pages per group: about 5 KiB of WAL
//! per event, half of all the agent wrote. A journal row is the group's few inputs for one session
//! (~150 bytes), appended.
//!
//! Compaction writes every journaled session's current fold back and empties the journal, in the
//! group's transaction, once the journal holds [`COMPACT_ROWS`] rows or [`COMPACT_PER_SESSION`] rows
//! per session on average (which bounds what a read replays). A crash at any point leaves the stored
//! rows and the journal of one commit: nothing to repair.

use std::collections::BTreeMap;

use apiary_schema::status::{Input, Rules, Tracker};
use apiary_schema::work::{OwnedFact, Work};
use rusqlite::{params, Connection};

/// The journal is compacted once it holds this many rows.
pub const COMPACT_ROWS: i64 = 16_384;
/// Or once it holds this many rows per journaled session on average (a read replays that many pushes).
pub const COMPACT_PER_SESSION: i64 = 32;

/// What the writer knows of the journal without reading it.
#[derive(Debug, Default, Clone)]
pub(crate) struct JournalState {
    pub rows: i64,
    pub sessions: std::collections::HashSet<String>,
}

impl JournalState {
    /// Reads the journal's size (at open).
    pub fn load(conn: &Connection) -> rusqlite::Result<JournalState> {
        let mut stmt = conn.prepare("SELECT session_id, count(*) FROM fold_journal GROUP BY 1")?;
        let mut state = JournalState::default();
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
        for row in rows {
            let (session, n) = row?;
            state.rows += n;
            state.sessions.insert(session);
        }
        Ok(state)
    }

    /// Whether the journal is due for compaction.
    pub fn due(&self) -> bool {
        self.rows >= COMPACT_ROWS
            || self.rows >= COMPACT_PER_SESSION * self.sessions.len().max(1) as i64
    }
}

/// Appends one group's pushes: a row per session, its health inputs and work facts in the order the
/// group pushed them.
pub(crate) fn append(
    conn: &Connection,
    status: &BTreeMap<String, Vec<Input>>,
    work: &BTreeMap<String, Vec<OwnedFact>>,
    journal: &mut JournalState,
) -> rusqlite::Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO fold_journal (session_id, health, work) VALUES (?1, ?2, ?3)",
    )?;
    let mut sessions: Vec<&String> = status.keys().chain(work.keys()).collect();
    sessions.sort_unstable();
    sessions.dedup();
    for session in sessions {
        let health = status
            .get(session)
            .map(|i| serde_json::to_string(i).expect("health inputs serialise"));
        let facts = work
            .get(session)
            .map(|f| serde_json::to_string(f).expect("work facts serialise"));
        insert.execute(params![session, health, facts])?;
        journal.rows += 1;
        if !journal.sessions.contains(session.as_str()) {
            journal.sessions.insert(session.clone());
        }
    }
    Ok(())
}

/// A session's journaled pushes, oldest first: (health inputs, work facts) per group.
pub(crate) type Pushes = Vec<(Option<Vec<Input>>, Option<Vec<OwnedFact>>)>;

fn pushes(conn: &Connection, session: &str, health: bool, work: bool) -> rusqlite::Result<Pushes> {
    let mut stmt = conn.prepare_cached(
        "SELECT health, work FROM fold_journal WHERE session_id = ?1 ORDER BY seq",
    )?;
    let rows = stmt.query_map([session], |r| {
        Ok((
            r.get::<_, Option<String>>(0)?,
            r.get::<_, Option<String>>(1)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (h, w) = row?;
        out.push((
            h.filter(|_| health).and_then(|h| parse(session, &h)),
            w.filter(|_| work).and_then(|w| parse(session, &w)),
        ));
    }
    Ok(out)
}

fn parse<T: serde::de::DeserializeOwned>(session: &str, json: &str) -> Option<T> {
    match serde_json::from_str(json) {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::warn!(session, error = %e, "unreadable fold journal row; skipped");
            None
        }
    }
}

/// Pushes `session`'s journaled health inputs onto `tracker`; false when there were none.
pub(crate) fn replay_health(
    conn: &Connection,
    session: &str,
    tracker: &mut Tracker,
) -> rusqlite::Result<bool> {
    let rules = Rules::default();
    let mut any = false;
    for (inputs, _) in pushes(conn, session, true, false)? {
        if let Some(inputs) = inputs {
            tracker.push(inputs, &rules);
            any = true;
        }
    }
    Ok(any)
}

/// Folds `session`'s journaled work facts into `work`; false when there were none.
pub(crate) fn replay_work(
    conn: &Connection,
    session: &str,
    work: &mut Work,
) -> rusqlite::Result<bool> {
    let mut any = false;
    for (_, facts) in pushes(conn, session, false, true)? {
        for f in facts.into_iter().flatten() {
            work.fold_parts(&f.fact(), f.at);
            any = true;
        }
    }
    Ok(any)
}

/// A session's journaled pushes, oldest first (for the listing, which replays them onto the folds it
/// read with its sessions).
pub(crate) fn of_session(conn: &Connection, session: &str) -> rusqlite::Result<Pushes> {
    pushes(conn, session, true, true)
}

/// Applies pushes read by [`of_session`] to a session's stored folds.
pub(crate) fn apply(pushes: &Pushes, tracker: &mut Tracker, work: &mut Work) {
    let rules = Rules::default();
    for (inputs, facts) in pushes {
        if let Some(inputs) = inputs {
            tracker.push(inputs.iter().cloned(), &rules);
        }
        for f in facts.iter().flatten() {
            work.fold_parts(&f.fact(), f.at);
        }
    }
}

/// Writes every journaled session's current folds back and empties the journal. `current` gives a
/// session's fold as of this group when the writer holds it (else it is read and replayed).
pub(crate) fn compact(
    conn: &Connection,
    journal: &mut JournalState,
    tracker_of: &dyn Fn(&str) -> Option<Tracker>,
    work_of: &dyn Fn(&str) -> Option<Work>,
) -> rusqlite::Result<()> {
    let mut stmt = conn.prepare_cached(
        "SELECT session_id, max(health IS NOT NULL), max(work IS NOT NULL)
         FROM fold_journal GROUP BY session_id",
    )?;
    let sessions: Vec<(String, bool, bool)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (session, health, work) in &sessions {
        if *health {
            let tracker = match tracker_of(session) {
                Some(t) => Some(t),
                None => super::health::load(conn, session)?,
            };
            if let Some(t) = tracker {
                super::health::store(conn, session, &t)?;
            }
        }
        if *work {
            let w = match work_of(session) {
                Some(w) => Some(w),
                None => super::work::load(conn, session)?,
            };
            if let Some(w) = w {
                super::work::store(conn, session, &w)?;
            }
        }
    }
    conn.prepare_cached("DELETE FROM fold_journal")?
        .execute([])?;
    tracing::debug!(
        sessions = sessions.len(),
        rows = journal.rows,
        "fold journal compacted"
    );
    journal.rows = 0;
    journal.sessions.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use apiary_schema::status::{Run, What};
    use apiary_schema::EventKind;
    use chrono::{DateTime, Duration, Utc};
    use std::collections::HashMap;
    use uuid::Uuid;

    fn conn() -> Connection {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::schema::migrate(&mut conn).unwrap();
        conn
    }

    fn t0() -> DateTime<Utc> {
        "2026-11-03T10:00:00Z".parse().unwrap()
    }

    /// A pseudo-random group sequence: per group, a few inputs (out of order within a window, as a
    /// backfill brings them) for a few of `sessions` sessions, and tool-call facts for the work fold.
    #[allow(clippy::type_complexity)]
    fn groups(
        n: usize,
        sessions: usize,
    ) -> Vec<(
        BTreeMap<String, Vec<Input>>,
        BTreeMap<String, Vec<OwnedFact>>,
    )> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut out = Vec::new();
        let mut id = 0u128;
        for g in 0..n {
            let (mut status, mut work) = (BTreeMap::new(), BTreeMap::new());
            for _ in 0..1 + next() % 4 {
                let s = format!("s{}", next() % sessions as u64);
                id += 1;
                let at = t0() + Duration::seconds(g as i64 * 5 - (next() % 40) as i64);
                let what = match next() % 6 {
                    0 => What::Llm {
                        ends_turn: next() % 2 == 0,
                    },
                    1 => What::ToolStarted {
                        tool: Some("read_file".into()),
                    },
                    2 => What::ToolDone {
                        tool: Some("read_file".into()),
                        error: next() % 5 == 0,
                    },
                    3 => What::Run { run: Run::Started },
                    4 => What::Signal {
                        signal: "stalled".into(),
                        tool: None,
                    },
                    _ => What::Work,
                };
                let input = Input {
                    at,
                    id: Uuid::from_u128(id),
                    what,
                    interactive: false,
                };
                status.entry(s.clone()).or_insert_with(Vec::new).push(input);
                if next() % 2 == 0 {
                    let mut data = serde_json::Map::new();
                    data.insert("status".into(), "started".into());
                    data.insert("tool_use_id".into(), format!("toolu_{}", id % 7).into());
                    data.insert("tool_name".into(), "read_file".into());
                    work.entry(s).or_insert_with(Vec::new).push(OwnedFact {
                        kind: EventKind::ToolCall,
                        id: Uuid::from_u128(id),
                        execution_id: None,
                        data,
                        at,
                    });
                }
            }
            out.push((status, work));
        }
        out
    }

    #[test]
    fn folds_read_through_the_journal_and_after_compaction_equal_folds_written_back_every_group() {
        let conn = conn();
        let rules = Rules::default();
        let sessions = 5;
        let mut model: HashMap<String, (Tracker, Work)> = HashMap::new();
        let mut journal = JournalState::default();
        let mut compactions = 0;
        for (status, facts) in groups(400, sessions) {
            // What every group used to write back: the model, pushed group by group.
            for (s, inputs) in &status {
                model
                    .entry(s.clone())
                    .or_default()
                    .0
                    .push(inputs.iter().cloned(), &rules);
            }
            for (s, fs) in &facts {
                for f in fs {
                    model
                        .entry(s.clone())
                        .or_default()
                        .1
                        .fold_parts(&f.fact(), f.at);
                }
            }
            // The writer's way, with no cache: every fold read back through the journal.
            let (mut trackers, mut works) = (HashMap::new(), HashMap::new());
            super::super::health::flush(&conn, &status, &HashMap::new(), &mut trackers).unwrap();
            super::super::work::flush(&conn, &facts, &HashMap::new(), &mut works).unwrap();
            append(&conn, &status, &facts, &mut journal).unwrap();
            if journal.due() {
                compact(&conn, &mut journal, &|_| None, &|_| None).unwrap();
                compactions += 1;
                let left: i64 = conn
                    .query_row("SELECT count(*) FROM fold_journal", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(left, 0);
            }
            for (s, (tracker, work)) in &model {
                let read = super::super::health::load(&conn, s).unwrap();
                assert_eq!(read.as_ref(), Some(tracker), "tracker of {s}");
                if !work.calls.is_empty() {
                    assert_eq!(
                        super::super::work::load(&conn, s).unwrap().as_ref(),
                        Some(work)
                    );
                }
            }
        }
        assert!(
            compactions >= 2,
            "the journal was compacted {compactions} times"
        );
        assert_eq!(super::super::health::load(&conn, "never").unwrap(), None);
        // The listing replays it too.
        for (s, (tracker, work)) in &model {
            let mut t: Tracker = conn
                .query_row(
                    "SELECT tracker FROM session_health WHERE session_id = ?1",
                    [s],
                    |r| r.get::<_, String>(0),
                )
                .map(|j| serde_json::from_str(&j).unwrap())
                .unwrap_or_default();
            let mut w: Work = conn
                .query_row(
                    "SELECT work FROM session_work WHERE session_id = ?1",
                    [s],
                    |r| r.get::<_, String>(0),
                )
                .map(|j| serde_json::from_str(&j).unwrap())
                .unwrap_or_default();
            apply(&of_session(&conn, s).unwrap(), &mut t, &mut w);
            assert_eq!(&t, tracker);
            assert_eq!(&w, work);
        }
    }

    #[test]
    fn compaction_is_due_by_rows_or_rows_per_session() {
        let mut j = JournalState::default();
        assert!(!j.due());
        j.sessions.insert("a".into());
        j.rows = COMPACT_PER_SESSION - 1;
        assert!(!j.due());
        j.rows = COMPACT_PER_SESSION;
        assert!(
            j.due(),
            "one session, many pushes: reads would replay them all"
        );
        for i in 0..10_000 {
            j.sessions.insert(format!("s{i}"));
        }
        j.rows = COMPACT_ROWS - 1;
        assert!(!j.due());
        j.rows = COMPACT_ROWS;
        assert!(j.due());
    }
}
