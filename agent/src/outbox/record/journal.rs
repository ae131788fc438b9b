//! The fold journal: what each group pushed into its sessions' health trackers ([`super::health`]) and
//! work folds ([`super::work`]), appended in the group's transaction instead of rewriting every touched
//! session's fold there.
//!
//! A session's fold is its stored row (`session_health`, `session_work`) with its journal rows replayed
//! on top, in order: the same pushes, the same inputs, so the same tracker and work as if each group had
//! written its folds back (the tracker's push is deterministic; the work fold is order-independent and
//! idempotent). Every reader goes through [`super::health::load`], [`super::work::load`], the live
//! stream's active time ([`super::live`]) or the listing, which replay.
//!
//! Why: a tracker is 1-5 KiB of JSON and a work fold up to a few KiB. When events of thousands of
//! sessions arrive interleaved (a backfill, several runtimes at once), a group of 2,000 events touches
//! about 2,000 sessions, and writing their folds back rewrote 2,000+ pages per group. Measured on that
//! backfill (the realistic bench, `/proc/PID/io`): 22 KiB written per event (WAL and checkpoint) before
//! the journal, 9.5 KiB with it. A journal row is the group's few inputs for one session, appended.
//!
//! Compaction writes folds back and deletes their journal rows, in the group's transaction: a session's
//! once it has [`SESSION_ROWS`] rows (which bounds what a read of it replays), the whole journal once it
//! holds [`COMPACT_ROWS`] rows (which bounds its size). A crash at any point leaves the stored rows and
//! the journal of one commit: nothing to repair.

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};
use std::marker::PhantomData;

use apiary_schema::status::{Input, Rules, Tracker};
use apiary_schema::work::{OwnedFact, Work};
use rusqlite::{params, Connection};

/// The whole journal is compacted once it holds this many rows (bounds its size).
pub const COMPACT_ROWS: i64 = 65_536;
/// A session's rows are compacted once it has this many (bounds what a read of it replays).
pub const SESSION_ROWS: u32 = 64;
/// A session to which a group pushes more than this many inputs and facts is written back at once
/// instead of journaled: its row would be a large copy of the group's events (a 16 MiB body of one
/// session's turns made a 5 MiB row), while its fold stays a few KiB.
pub const LARGE_PUSH: usize = 256;

/// What the writer knows of the journal without reading it: its rows, per session.
#[derive(Debug, Default, Clone)]
pub(crate) struct JournalState {
    pub rows: i64,
    pub per_session: HashMap<String, u32>,
    /// Sessions of this group's large pushes ([`LARGE_PUSH`]), to write back at once.
    pub write_now: Vec<String>,
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
            state
                .per_session
                .insert(session, n.clamp(0, u32::MAX as i64) as u32);
        }
        Ok(state)
    }

    /// Whether the whole journal is due for compaction.
    pub fn due(&self) -> bool {
        self.rows >= COMPACT_ROWS
    }

    /// The sessions due for compaction of their own rows.
    fn sessions_due(&self) -> Vec<String> {
        self.per_session
            .iter()
            .filter(|(_, n)| **n >= SESSION_ROWS)
            .map(|(s, _)| s.clone())
            .collect()
    }
}

/// Appends one group's pushes: a row per session, its health inputs and work facts in the order the
/// group pushed them.
pub(crate) fn append<H: Borrow<Input>, W: Borrow<OwnedFact>>(
    conn: &Connection,
    status: &BTreeMap<String, Vec<H>>,
    work: &BTreeMap<String, Vec<W>>,
    journal: &mut JournalState,
) -> rusqlite::Result<()> {
    let mut insert = conn.prepare_cached(
        "INSERT INTO fold_journal (session_id, health, work) VALUES (?1, ?2, ?3)",
    )?;
    let mut sessions: Vec<&String> = status.keys().chain(work.keys()).collect();
    sessions.sort_unstable();
    sessions.dedup();
    for session in sessions {
        let pushed =
            status.get(session).map_or(0, Vec::len) + work.get(session).map_or(0, Vec::len);
        if pushed > LARGE_PUSH {
            journal.write_now.push(session.clone());
            continue;
        }
        let health = status.get(session).map(|i| {
            serde_json::to_string(&Seq::<Input, _>(i, PhantomData))
                .expect("health inputs serialise")
        });
        let facts = work.get(session).map(|f| {
            serde_json::to_string(&Seq::<OwnedFact, _>(f, PhantomData))
                .expect("work facts serialise")
        });
        insert.execute(params![session, health, facts])?;
        journal.rows += 1;
        match journal.per_session.get_mut(session.as_str()) {
            Some(n) => *n += 1,
            None => {
                journal.per_session.insert(session.clone(), 1);
            }
        }
    }
    Ok(())
}

/// A list of `T` held by whatever borrows as one (the group's inputs are shared with the events they came
/// from), serialised as a list of `T`.
struct Seq<'a, T, B>(&'a [B], PhantomData<fn() -> T>);

impl<T: serde::Serialize, B: Borrow<T>> serde::Serialize for Seq<'_, T, B> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Borrow::<T>::borrow))
    }
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

/// A session's tracker: its stored row ([`super::snapshot`]) with its journaled inputs pushed on top
/// (None: no input of it was ever committed).
pub(crate) fn tracker(conn: &Connection, session: &str) -> rusqlite::Result<Option<Tracker>> {
    let stored = super::snapshot::tracker(conn, session)?;
    let had_row = stored.is_some();
    let mut tracker = stored.unwrap_or_default();
    let journaled = replay_health(conn, session, &mut tracker)?;
    Ok((had_row || journaled).then_some(tracker))
}

/// A session's work: its stored row with its journaled facts folded in (None: none of its events was
/// read by the fold).
pub(crate) fn work(conn: &Connection, session: &str) -> rusqlite::Result<Option<Work>> {
    let stored = super::snapshot::work(conn, session)?;
    let had_row = stored.is_some();
    let mut work = stored.unwrap_or_default();
    let journaled = replay_work(conn, session, &mut work)?;
    Ok((had_row || journaled).then_some(work))
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

/// A session's fold as of this group, when the writer holds it (else it is read and replayed).
pub(crate) type Current<'a, T> = &'a dyn Fn(&str) -> Option<T>;

/// Compacts what is due: the whole journal past [`COMPACT_ROWS`] rows, else the sessions of large
/// pushes and the rows of each session past [`SESSION_ROWS`]. The folds are written back and their
/// journal rows deleted.
pub(crate) fn compact_due(
    conn: &Connection,
    journal: &mut JournalState,
    tracker_of: Current<'_, Tracker>,
    work_of: Current<'_, Work>,
) -> rusqlite::Result<()> {
    for session in std::mem::take(&mut journal.write_now) {
        // Its journal rows, if any, are in the fold written back.
        write_back(conn, &session, true, true, tracker_of, work_of)?;
        let n = conn
            .prepare_cached("DELETE FROM fold_journal WHERE session_id = ?1")?
            .execute([&session])?;
        journal.rows -= n as i64;
        journal.per_session.remove(&session);
    }
    if journal.due() {
        let mut stmt = conn.prepare_cached(
            "SELECT session_id, max(health IS NOT NULL), max(work IS NOT NULL)
             FROM fold_journal GROUP BY session_id",
        )?;
        let sessions: Vec<(String, bool, bool)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        for (session, health, work) in &sessions {
            write_back(conn, session, *health, *work, tracker_of, work_of)?;
        }
        conn.prepare_cached("DELETE FROM fold_journal")?
            .execute([])?;
        tracing::debug!(
            sessions = sessions.len(),
            rows = journal.rows,
            "fold journal compacted"
        );
        journal.rows = 0;
        journal.per_session.clear();
        return Ok(());
    }
    for session in journal.sessions_due() {
        let (health, work): (bool, bool) = conn
            .prepare_cached(
                "SELECT max(health IS NOT NULL), max(work IS NOT NULL) FROM fold_journal
                 WHERE session_id = ?1",
            )?
            .query_row([&session], |r| {
                Ok((
                    r.get::<_, Option<bool>>(0)?.unwrap_or(false),
                    r.get::<_, Option<bool>>(1)?.unwrap_or(false),
                ))
            })?;
        write_back(conn, &session, health, work, tracker_of, work_of)?;
        let n = conn
            .prepare_cached("DELETE FROM fold_journal WHERE session_id = ?1")?
            .execute([&session])?;
        journal.rows -= n as i64;
        journal.per_session.remove(&session);
    }
    Ok(())
}

fn write_back(
    conn: &Connection,
    session: &str,
    health: bool,
    work: bool,
    tracker_of: Current<'_, Tracker>,
    work_of: Current<'_, Work>,
) -> rusqlite::Result<()> {
    if health {
        let tracker = match tracker_of(session) {
            Some(t) => Some(t),
            None => self::tracker(conn, session)?,
        };
        if let Some(t) = tracker {
            super::snapshot::store_tracker(conn, session, &t)?;
        }
    }
    if work {
        let w = match work_of(session) {
            Some(w) => Some(w),
            None => self::work(conn, session)?,
        };
        if let Some(w) = w {
            super::snapshot::store_work(conn, session, &w)?;
        }
    }
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

    /// A group that pushed no work facts.
    fn no_facts() -> BTreeMap<String, Vec<OwnedFact>> {
        BTreeMap::new()
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
            super::super::health::flush(&conn, &status, &mut HashMap::new(), &mut trackers)
                .unwrap();
            super::super::work::flush(&conn, &facts, &mut HashMap::new(), &mut works).unwrap();
            append(&conn, &status, &facts, &mut journal).unwrap();
            let before = journal.rows;
            compact_due(&conn, &mut journal, &|_| None, &|_| None).unwrap();
            let left: i64 = conn
                .query_row("SELECT count(*) FROM fold_journal", [], |r| r.get(0))
                .unwrap();
            assert_eq!(left, journal.rows, "the state counts the table's rows");
            if journal.rows < before {
                compactions += 1;
            }
            assert!(journal.per_session.values().all(|n| *n < SESSION_ROWS));
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
    fn a_large_push_is_written_back_at_once_with_the_rows_before_it() {
        let conn = conn();
        let rules = Rules::default();
        let mut journal = JournalState::default();
        let input = |n: u128| Input {
            at: t0() + Duration::seconds(n as i64),
            id: Uuid::from_u128(n),
            what: What::Llm {
                ends_turn: n.is_multiple_of(3),
            },
            interactive: false,
        };
        let mut model = Tracker::default();
        let mut push = |inputs: Vec<Input>, journal: &mut JournalState| {
            model.push(inputs.iter().cloned(), &rules);
            let status = BTreeMap::from([("s".to_string(), inputs)]);
            let mut trackers = HashMap::new();
            super::super::health::flush(&conn, &status, &mut HashMap::new(), &mut trackers)
                .unwrap();
            append(&conn, &status, &no_facts(), journal).unwrap();
            compact_due(&conn, journal, &|s| trackers.get(s).cloned(), &|_| None).unwrap();
            model.clone()
        };
        push(vec![input(1)], &mut journal);
        push(vec![input(2)], &mut journal);
        assert_eq!(journal.rows, 2);
        let want = push(
            (3..=3 + LARGE_PUSH as u128).map(input).collect(),
            &mut journal,
        );
        assert_eq!(journal.rows, 0, "written back, the rows before it with it");
        let rows: i64 = conn
            .query_row("SELECT count(*) FROM fold_journal", [], |r| r.get(0))
            .unwrap();
        assert_eq!(rows, 0);
        assert_eq!(super::super::health::load(&conn, "s").unwrap(), Some(want));
        // A first push that is large has no rows before it, and is written back all the same.
        let status = BTreeMap::from([(
            "new".to_string(),
            (1000..1001 + LARGE_PUSH as u128)
                .map(input)
                .collect::<Vec<_>>(),
        )]);
        let mut trackers = HashMap::new();
        super::super::health::flush(&conn, &status, &mut HashMap::new(), &mut trackers).unwrap();
        append(&conn, &status, &no_facts(), &mut journal).unwrap();
        compact_due(&conn, &mut journal, &|s| trackers.get(s).cloned(), &|_| {
            None
        })
        .unwrap();
        assert_eq!(
            super::super::health::load(&conn, "new").unwrap().as_ref(),
            trackers.get("new")
        );
    }

    #[test]
    fn the_whole_journal_is_compacted_past_its_rows_and_a_session_past_its_own() {
        let conn = conn();
        let mut journal = JournalState::default();
        let input = |n: u128| Input {
            at: t0() + Duration::seconds(n as i64),
            id: Uuid::from_u128(n),
            what: What::Llm { ends_turn: true },
            interactive: false,
        };
        // Many sessions, one push each per group: the journal fills before any session reaches its
        // own bound.
        const SESSIONS: usize = 2000;
        assert!(COMPACT_ROWS / (SESSIONS as i64) < SESSION_ROWS as i64);
        let mut n = 0u128;
        while journal.rows < COMPACT_ROWS - SESSIONS as i64 {
            let status: BTreeMap<String, Vec<Input>> = (0..SESSIONS)
                .map(|s| {
                    n += 1;
                    (format!("s{s}"), vec![input(n)])
                })
                .collect();
            append(&conn, &status, &no_facts(), &mut journal).unwrap();
            compact_due(&conn, &mut journal, &|_| None, &|_| None).unwrap();
        }
        assert!(journal.rows > 0 && journal.per_session.len() == SESSIONS);
        let status: BTreeMap<String, Vec<Input>> = (0..SESSIONS)
            .map(|s| (format!("s{s}"), vec![input(n + 1 + s as u128)]))
            .collect();
        append(&conn, &status, &no_facts(), &mut journal).unwrap();
        compact_due(&conn, &mut journal, &|_| None, &|_| None).unwrap();
        assert_eq!(
            journal.rows, 0,
            "past {COMPACT_ROWS} rows the whole journal goes"
        );
        let stored: i64 = conn
            .query_row("SELECT count(*) FROM session_health", [], |r| r.get(0))
            .unwrap();
        assert_eq!(stored, SESSIONS as i64);
        // One session pushed to in every group: its own rows go at SESSION_ROWS, the others' stay.
        for g in 0..SESSION_ROWS as u128 {
            let mut status = BTreeMap::from([("hot".to_string(), vec![input(1_000_000 + g)])]);
            if g == 0 {
                status.insert("cold".into(), vec![input(2_000_000)]);
            }
            append(&conn, &status, &no_facts(), &mut journal).unwrap();
            compact_due(&conn, &mut journal, &|_| None, &|_| None).unwrap();
        }
        assert_eq!(journal.rows, 1, "only the cold session's row is left");
        assert!(!journal.per_session.contains_key("hot"));
        let hot = super::super::health::load(&conn, "hot").unwrap().unwrap();
        assert_eq!(
            hot.current(&Rules::default()).last_key.map(|k| k.1),
            Some(Uuid::from_u128(1_000_000 + SESSION_ROWS as u128 - 1))
        );
    }
}
