//! Session health in a batch's transaction: each session's new events are pushed into its stored
//! [`Tracker`](apiary_schema::status::Tracker) (`sessions.health`) in event-time order ([`prepare`],
//! before the session upsert, which writes the trackers with the other facts), and the transitions they
//! change are written to `status_transitions` ([`store_transitions`]).
//!
//! - The session rows were locked in step 1 ([`super::owners::claim`]), so two batches of one session
//!   fold one after the other, never interleaved; transitions are keyed `(tenant_id, session_id, seq)`
//!   and a push rewrites only from the first transition it changed, so a replica can never add a second
//!   copy of a transition, and a late event rewrites exactly the recent history it changes.
//! - `stall_due_at` is when the no-progress rule will fire if nothing else arrives. It lets the
//!   tenant-wide transitions read find the sessions that went quiet without storing anything from a clock.
//! - A session stored before the health model existed (`health` NULL, older events), or whose tracker
//!   cannot be read, gets its tracker and history rebuilt from its stored events plus the batch's, in time
//!   order, the first time a batch touches it.
//!
//! - The active time the rollups hold (`active_ms`, [`super::active`]) follows the history: for every
//!   session it folds, [`prepare`] also says which active stretches the batch takes away and adds
//!   ([`ActiveChange`]), under which rollup key.
//!
//! Cost (ingest benchmark, 1,000-event batches touching 20 sessions, dev profile, A/B in one run): a
//! separate read, update, delete and insert per batch took 49 ms of a batch's ≈ 250 ms and cut throughput
//! by about 30%; riding the session upsert and writing only changed transitions, about 18%.

use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::input::is_interactive;
use apiary_schema::status::{Input, Rules, Transition, What};
use apiary_schema::EventKind;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use super::active::{self, Stretch};
use super::sessions::{Folded, SessionUpdate};
use crate::intake::ReadyEvent;

/// The batch's new events as health inputs, per session, at their effective times.
pub fn inputs(events: &[&ReadyEvent]) -> BTreeMap<String, Vec<Input>> {
    let mut out: BTreeMap<String, Vec<Input>> = BTreeMap::new();
    for e in events {
        if let (Some(s), Some(i)) = (&e.event.session_id, Input::of(&e.event, e.effective_at)) {
            out.entry(s.clone()).or_default().push(i);
        }
    }
    out
}

/// The identity part of a session's usage rollup key its active time is kept under: user, device,
/// colony, runtime (`''` for none).
pub type ActiveKey = (String, String, String, String);

/// How a batch changes a session's active time in the rollups: `removed` stretches come off under
/// `old_key`, `added` ones go on under `new_key` (the same key unless the batch made the session's
/// colony or runtime known).
#[derive(Debug, Clone, PartialEq)]
pub struct ActiveChange {
    pub session: String,
    pub old_key: ActiveKey,
    pub new_key: ActiveKey,
    pub removed: Vec<Stretch>,
    pub added: Vec<Stretch>,
}

/// What [`prepare`] found: the new trackers and the history writes.
#[derive(Debug, Default)]
pub struct Prepared {
    pub sessions: BTreeMap<String, Folded>,
    /// The active-time changes, per session folded.
    pub active: Vec<ActiveChange>,
    writes: TransitionRows,
    /// (session, first seq) of the sessions whose stored transitions from that seq on are replaced.
    replaced: Vec<(String, i64)>,
    /// The stored work of the sessions asked for (`work_of`): (session, `sessions.work`, events), for
    /// [`super::work::prepare`] — read by the same statement as the trackers.
    pub works: Vec<(String, Option<String>, i64)>,
}

/// A session row as [`read`] reads it.
#[derive(sqlx::FromRow)]
pub struct Stored {
    tenant_id: Uuid,
    session_id: String,
    health: Option<String>,
    events: i64,
    user_id: String,
    device_id: String,
    colony_id: Option<String>,
    runtime: Option<String>,
    stall_due_at: Option<DateTime<Utc>>,
    work: Option<String>,
}

/// The sessions a tenant's batches push inputs into or fold work of (the keys of [`prepare`]'s `inputs`
/// and its `work_of`), sorted and distinct.
pub fn wanted<'a>(inputs: &'a BTreeMap<String, Vec<Input>>, work_of: &[&'a str]) -> Vec<&'a str> {
    let mut ids: Vec<&str> = inputs.keys().map(String::as_str).collect();
    ids.extend_from_slice(work_of);
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Reads the stored rows [`prepare`] folds into, for all `tenants` (tenant, its [`wanted`] sessions) in
/// one statement; returns them per tenant, in session order.
pub async fn read(
    tx: &mut Transaction<'_, Postgres>,
    tenants: &[(Uuid, Vec<&str>)],
) -> Result<HashMap<Uuid, Vec<Stored>>, sqlx::Error> {
    let (mut ids, mut sessions) = (vec![], vec![]);
    for (tenant, wanted) in tenants {
        ids.extend(std::iter::repeat_n(*tenant, wanted.len()));
        sessions.extend(wanted.iter().copied());
    }
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let mut distinct: Vec<Uuid> = tenants.iter().map(|t| t.0).collect();
    distinct.dedup();
    // `tenant_id = ANY($3)` as well as the join: Citus routes the statement to the tenants' shards by it.
    let rows: Vec<Stored> = sqlx::query_as(
        "SELECT s.tenant_id, s.session_id, s.health::text AS health, s.events, s.user_id, s.device_id,
             s.colony_id, s.runtime, s.stall_due_at, s.work::text AS work
         FROM unnest($1::uuid[], $2::text[]) AS u(tenant, id)
         JOIN sessions s ON s.tenant_id = u.tenant AND s.session_id = u.id
         WHERE s.tenant_id = ANY($3)
         ORDER BY s.tenant_id, s.session_id",
    )
    .bind(&ids)
    .bind(&sessions)
    .bind(&distinct)
    .fetch_all(&mut **tx)
    .await?;
    let mut out: HashMap<Uuid, Vec<Stored>> = HashMap::new();
    for row in rows {
        out.entry(row.tenant_id).or_default().push(row);
    }
    Ok(out)
}

/// Pushes `inputs` into the sessions' stored trackers (`rows`, as [`read`] returned them for this
/// tenant). `updates` are the batch's session facts (the colony and runtime a session's rollup key gets
/// when they become known). Also hands on the stored work of the sessions `work_of` names
/// ([`Prepared::works`]).
pub async fn prepare(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    rules: &Rules,
    mut inputs: BTreeMap<String, Vec<Input>>,
    updates: &BTreeMap<String, SessionUpdate>,
    work_of: &[&str],
    rows: Vec<Stored>,
) -> Result<Prepared, sqlx::Error> {
    let mut out = Prepared::default();
    for mut row in rows {
        let sid = row.session_id.clone();
        if work_of.binary_search(&sid.as_str()).is_ok() {
            out.works.push((sid.clone(), row.work.take(), row.events));
        }
        if !inputs.contains_key(&sid) {
            continue;
        }
        let mut new = inputs.remove(&sid).unwrap_or_default();
        let parsed = row
            .health
            .as_deref()
            .and_then(crate::status::tracker_from_text);
        // No readable tracker: start over from every stored event, replacing whatever history exists.
        let fresh = parsed.is_none();
        let mut tracker = parsed.unwrap_or_default();
        let before = tracker.clone();
        if fresh && row.events > 0 {
            let mut all = stored_inputs(tx, tenant_id, &sid).await?;
            all.append(&mut new);
            new = all;
        }
        new.sort_by_key(Input::key);
        let update = tracker.push(new, rules);
        if fresh || update.replaces {
            let first = if fresh { 0 } else { update.first_seq as i64 };
            out.replaced.push((sid.clone(), first));
        }
        let pushed = Pushed {
            before: &before,
            update: &update,
            fresh,
        };
        let change = active_change(tx, tenant_id, &row, updates.get(&sid), pushed, rules).await?;
        out.active.push(change);
        for x in update.transitions {
            out.writes.push(&sid, x);
        }
        out.sessions.insert(
            sid,
            Folded {
                health: serde_json::to_string(&tracker).expect("a tracker serialises"),
                stall_due_at: update.current.due(rules),
                ended: update.current.end().map(|s| s.as_str()),
            },
        );
    }
    Ok(out)
}

impl Prepared {
    /// The transitions [`store_transitions`] will write, as the live stream carries them.
    pub fn streamed(&self) -> Vec<super::stream::StatusData> {
        let t = &self.writes;
        (0..t.session.len())
            .map(|i| super::stream::StatusData {
                session_id: t.session[i].clone(),
                seq: t.seq[i],
                at: t.at[i],
                from: t.from[i],
                to: t.to[i],
                cause: t.cause[i].clone(),
            })
            .collect()
    }
}

/// Writes the transitions [`prepare`] computed (after the session upsert stored the trackers).
pub async fn store_transitions(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    p: Prepared,
) -> Result<(), sqlx::Error> {
    if !p.replaced.is_empty() {
        let (ids, firsts): (Vec<String>, Vec<i64>) = p.replaced.into_iter().unzip();
        sqlx::query(
            "DELETE FROM status_transitions t USING unnest($2::text[], $3::int8[]) AS u(id, first)
             WHERE t.tenant_id = $1 AND t.session_id = u.id AND t.seq >= u.first",
        )
        .bind(tenant_id)
        .bind(&ids)
        .bind(&firsts)
        .execute(&mut **tx)
        .await?;
    }
    let t = p.writes;
    if t.session.is_empty() {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO status_transitions (tenant_id, session_id, seq, at, from_status, to_status, cause)
         SELECT $1, u.* FROM unnest($2::text[], $3::int8[], $4::timestamptz[], $5::text[], $6::text[],
             $7::text[]) AS u",
    )
    .bind(tenant_id)
    .bind(&t.session)
    .bind(&t.seq)
    .bind(&t.at)
    .bind(&t.from)
    .bind(&t.to)
    .bind(&t.cause)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Transitions as columns, for one `unnest` insert.
#[derive(Debug, Default)]
struct TransitionRows {
    session: Vec<String>,
    seq: Vec<i64>,
    at: Vec<DateTime<Utc>>,
    from: Vec<Option<&'static str>>,
    to: Vec<&'static str>,
    cause: Vec<String>,
}

impl TransitionRows {
    fn push(&mut self, session: &str, x: Transition) {
        self.session.push(session.to_string());
        self.seq.push(x.seq as i64);
        self.at.push(x.at);
        self.from.push(x.from.map(|s| s.as_str()));
        self.to.push(x.to.as_str());
        self.cause.push(x.cause);
    }
}

/// One session's push: its tracker before, the update the push gave, and whether it started over.
struct Pushed<'a> {
    before: &'a apiary_schema::status::Tracker,
    update: &'a apiary_schema::status::Update,
    fresh: bool,
}

/// What the batch's update of one session's history does to its active time (see [`super::active`]).
async fn active_change(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    row: &Stored,
    batch: Option<&SessionUpdate>,
    pushed: Pushed<'_>,
    rules: &Rules,
) -> Result<ActiveChange, sqlx::Error> {
    let Pushed {
        before,
        update,
        fresh,
    } = pushed;
    let key = |colony: Option<&String>, runtime: Option<&String>| {
        (
            row.user_id.clone(),
            row.device_id.clone(),
            colony.cloned().unwrap_or_default(),
            runtime.cloned().unwrap_or_default(),
        )
    };
    let old_key = key(row.colony_id.as_ref(), row.runtime.as_ref());
    let new_key = key(
        row.colony_id
            .as_ref()
            .or(batch.and_then(|u| u.colony_id.as_ref())),
        row.runtime
            .as_ref()
            .or(batch.and_then(|u| u.runtime.as_ref())),
    );
    let new_due = update.current.due(rules);
    let new_tail = update.transitions.iter().map(active::step);
    let had_history = before.settled.transitions > 0 || !before.provisional.is_empty();
    let (old_chain, new_chain): (Vec<_>, Vec<_>) = if fresh || old_key != new_key {
        // The whole history moves: what is stored now, and what will be.
        let stored = if had_history || (fresh && row.events > 0) {
            stored_steps(tx, tenant_id, &row.session_id).await?
        } else {
            vec![]
        };
        let keep = if fresh { 0 } else { update.first_seq as usize };
        let new = stored.iter().take(keep).copied().chain(new_tail).collect();
        (stored, new)
    } else {
        let same = (update.first_seq - before.settled.transitions) as usize;
        let prev = match same {
            0 => active::last_settled(&before.settled),
            n => before.provisional.get(n - 1).map(active::step),
        };
        let old_tail = before.provisional.iter().skip(same).map(active::step);
        (
            prev.into_iter().chain(old_tail).collect(),
            prev.into_iter().chain(new_tail).collect(),
        )
    };
    Ok(ActiveChange {
        session: row.session_id.clone(),
        old_key,
        new_key,
        removed: active::stretches(&old_chain, row.stall_due_at),
        added: active::stretches(&new_chain, new_due),
    })
}

/// A session's stored status history, in order.
async fn stored_steps(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    session: &str,
) -> Result<Vec<active::Step>, sqlx::Error> {
    let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
        "SELECT to_status, at FROM status_transitions WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq",
    )
    .bind(tenant_id)
    .bind(session)
    .fetch_all(&mut **tx)
    .await?;
    Ok(rows
        .into_iter()
        .filter_map(|(to, at)| Some((apiary_schema::status::Status::parse(&to)?, at)))
        .collect())
}

/// Every stored event of a session as health inputs (the rebuild of a session stored before the health
/// model existed).
async fn stored_inputs(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    session: &str,
) -> Result<Vec<Input>, sqlx::Error> {
    let rows: Vec<(Uuid, DateTime<Utc>, String, String, serde_json::Value)> = sqlx::query_as(
        "SELECT event_id, effective_at, kind, runtime, data FROM events
         WHERE tenant_id = $1 AND session_id = $2 ORDER BY effective_at, event_id",
    )
    .bind(tenant_id)
    .bind(session)
    .fetch_all(&mut **tx)
    .await?;
    let empty = serde_json::Map::new();
    Ok(rows
        .into_iter()
        .filter_map(|(id, at, kind, runtime, data)| {
            let kind = EventKind::parse(&kind)?;
            Some(Input {
                at,
                id,
                what: What::from_data(kind, data.as_object().unwrap_or(&empty)),
                interactive: is_interactive(&runtime),
            })
        })
        .collect())
}
