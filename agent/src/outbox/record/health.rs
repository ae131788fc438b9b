//! Local session status: the shared health model ([`apiary_schema::status`]) kept per session in the
//! outbox, so the desktop sees status, history and time in state with sync off or air-gapped.
//!
//! Every group commit pushes its new events (in `occurred_at` order, the same order and inputs the ingest
//! folds) into each session's [`Tracker`] (`session_health` with the fold journal replayed on top, see
//! [`super::journal`]: the group journals its inputs instead of writing the tracker back) and applies the returned [`Update`] to
//! `status_transitions` (drop `seq >= first_seq` when a late event changed them, insert the new ones), in the group's
//! transaction. Reads let time pass up to now ([`view`]); the device is the agent's own, so it is never
//! `offline` here. The agent folds with the default thresholds (`stall_after` 300 s), the ingest's
//! default too.
//!
//! [`Update`]: apiary_schema::status::Update

use std::borrow::Borrow;
use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::{
    view, Durations, Input, Liveness, Rules, Status, Tracker, Transition, View,
};
use chrono::{DateTime, Utc};
use rusqlite::{params, Connection};
use serde::Serialize;

/// Folds a group's new inputs (per session) into the stored trackers and history.
/// `cache` holds the last committed trackers of recent sessions (read instead of the row). A tracker the
/// group pushes to is taken out of it (no copy) and goes to `written`, back into the cache once the
/// group commits; if it fails, the cache simply lacks it and the next group reads it from the table.
pub(crate) fn flush<I: Borrow<Input>>(
    conn: &Connection,
    inputs: &BTreeMap<String, Vec<I>>,
    cache: &mut HashMap<String, (u64, Tracker)>,
    written: &mut HashMap<String, Tracker>,
) -> rusqlite::Result<()> {
    let rules = Rules::default();
    let now_ms = Utc::now().timestamp_millis();
    for (session, new) in inputs {
        let mut tracker = match cache.remove(session) {
            Some((_, t)) => t,
            None => load(conn, session)?.unwrap_or_default(),
        };
        let update = tracker.push(new.iter().map(|i| i.borrow().clone()), &rules);
        if update.replaces {
            conn.prepare_cached(
                "DELETE FROM status_transitions WHERE session_id = ?1 AND seq >= ?2",
            )?
            .execute(params![session, update.first_seq as i64])?;
        }
        let mut insert = conn.prepare_cached(
            "INSERT INTO status_transitions (session_id, seq, at, from_status, to_status, cause)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for t in &update.transitions {
            insert.execute(params![
                session,
                t.seq as i64,
                t.at.timestamp_micros(),
                t.from.map(Status::as_str),
                t.to.as_str(),
                t.cause
            ])?;
            super::live::status(conn, session, t, now_ms)?;
        }
        written.insert(session.clone(), tracker);
    }
    Ok(())
}

/// A session's tracker: its stored row with the fold journal replayed (None: no input of it was ever
/// committed).
pub(crate) fn load(conn: &Connection, session: &str) -> rusqlite::Result<Option<Tracker>> {
    super::journal::tracker(conn, session)
}

/// The `crashed` transition the runtime found gone at `gone_at` gives `session` at `now` (None when it
/// does not read crashed: unknown, ended, or an event later than `gone_at`).
pub(crate) fn crashed(
    conn: &Connection,
    session: &str,
    gone_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> rusqlite::Result<Option<Transition>> {
    let Some(tracker) = load(conn, session)? else {
        return Ok(None);
    };
    let rules = Rules::default();
    let live = Liveness {
        runtime_gone_at: Some(gone_at),
        ..Liveness::local(now)
    };
    let v = view(&tracker.current(&rules), now, &live, &rules);
    Ok((v.status == Status::Crashed)
        .then(|| v.derived.into_iter().find(|t| t.to == Status::Crashed))
        .flatten())
}

/// A session's local status.
#[derive(Debug, Clone, Serialize)]
pub struct SessionStatus {
    pub session_id: String,
    pub status: Status,
    pub status_since: Option<DateTime<Utc>>,
    pub status_cause: String,
    /// Seconds in each status, up to now.
    pub time_in_state: BTreeMap<Status, f64>,
    /// Wall-clock (first event → end, or now while open) and active time (the shared
    /// [`apiary_schema::status::durations`] rule, the ingest's too).
    pub durations: Durations,
    /// Every transition oldest first, then those time caused since the last event.
    pub transitions: Vec<Transition>,
    /// Tasks, triggers, next wake and the tool call in flight (the shared [`apiary_schema::work`] view,
    /// the same fields as the ingest's session detail).
    #[serde(flatten)]
    pub work: apiary_schema::work::WorkView,
}

/// The local status of `session` at `now`, its runtime found gone at `runtime_gone_at` (the `crashed`
/// overlay; None when alive or unknown); None when no event of it was ever committed here.
pub fn session_status(
    conn: &Connection,
    session: &str,
    now: DateTime<Utc>,
    runtime_gone_at: Option<DateTime<Utc>>,
) -> rusqlite::Result<Option<SessionStatus>> {
    let Some(tracker) = load(conn, session)? else {
        return Ok(None);
    };
    let rules = Rules::default();
    let live = Liveness {
        runtime_gone_at,
        ..Liveness::local(now)
    };
    let health = tracker.current(&rules);
    let v: View = view(&health, now, &live, &rules);
    let durations = Durations::of(&health, &v, now);
    let mut stmt = conn.prepare_cached(
        "SELECT seq, at, from_status, to_status, cause FROM status_transitions
         WHERE session_id = ?1 ORDER BY seq",
    )?;
    let mut transitions: Vec<Transition> = stmt
        .query_map([session], |r| {
            let from: Option<String> = r.get(2)?;
            let to: String = r.get(3)?;
            Ok(Transition {
                seq: r.get::<_, i64>(0)? as u64,
                at: DateTime::from_timestamp_micros(r.get(1)?).unwrap_or_default(),
                from: from.as_deref().and_then(Status::parse),
                to: Status::parse(&to).unwrap_or(Status::Idle),
                cause: r.get(4)?,
            })
        })?
        .collect::<rusqlite::Result<_>>()?;
    transitions.extend(v.derived);
    Ok(Some(SessionStatus {
        session_id: session.to_string(),
        status: v.status,
        status_since: v.since,
        status_cause: v.cause,
        time_in_state: v.time_in_state,
        durations,
        transitions,
        work: super::journal::work(conn, session)?
            .unwrap_or_default()
            .view(),
    }))
}
