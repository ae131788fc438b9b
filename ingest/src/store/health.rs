//! Session health, step 4b of a batch (after the events are written): each session's new events are
//! pushed into its stored [`Tracker`] (`sessions.health`) in event-time order and the transitions they
//! change are rewritten in `status_transitions`.
//!
//! - The session rows were locked in step 1 ([`super::owners::claim`]), so two batches of one session
//!   fold one after the other, never interleaved; transitions are keyed `(tenant_id, session_id, seq)`
//!   and a push replaces every `seq >= first_seq` it recomputed, so a replica can never add a second copy
//!   of a transition, and a late event rewrites exactly the recent history it changes.
//! - `stall_due_at` is when the no-progress rule will fire if nothing else arrives. It lets the
//!   tenant-wide transitions read find the sessions that went quiet without storing anything from a clock.
//! - A session stored before the health model existed (`health` NULL, older events) gets its tracker
//!   rebuilt from its stored events, in time order, the first time a batch touches it.

use std::collections::BTreeMap;

use apiary_schema::status::{Input, Rules, Tracker, What};
use apiary_schema::EventKind;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::intake::ReadyEvent;

/// The batch's new events as health inputs, per session, at their effective times.
pub fn inputs(events: &[ReadyEvent]) -> BTreeMap<String, Vec<Input>> {
    let mut out: BTreeMap<String, Vec<Input>> = BTreeMap::new();
    for e in events {
        if let (Some(s), Some(i)) = (&e.event.session_id, Input::of(&e.event, e.effective_at)) {
            out.entry(s.clone()).or_default().push(i);
        }
    }
    for v in out.values_mut() {
        v.sort_by_key(Input::key);
    }
    out
}

/// Folds `inputs` into the sessions' trackers and rewrites their recent transitions.
pub async fn fold(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    rules: &Rules,
    mut inputs: BTreeMap<String, Vec<Input>>,
) -> Result<(), sqlx::Error> {
    if inputs.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = inputs.keys().map(String::as_str).collect();
    let rows: Vec<(String, Option<serde_json::Value>, i64)> = sqlx::query_as(
        "SELECT session_id, health, events FROM sessions
         WHERE tenant_id = $1 AND session_id = ANY($2) ORDER BY session_id",
    )
    .bind(tenant_id)
    .bind(&ids)
    .fetch_all(&mut **tx)
    .await?;
    let mut sessions = Vec::with_capacity(rows.len());
    let mut healths = Vec::with_capacity(rows.len());
    let mut dues: Vec<Option<DateTime<Utc>>> = Vec::with_capacity(rows.len());
    let mut firsts = Vec::with_capacity(rows.len());
    let mut t = TransitionRows::default();
    for (sid, stored, events) in rows {
        let new = inputs.remove(&sid).unwrap_or_default();
        let (mut tracker, new) = match stored {
            Some(v) => (crate::status::tracker(Some(&v)), new),
            None if events > new.len() as i64 => (
                Tracker::default(),
                stored_inputs(tx, tenant_id, &sid).await?,
            ),
            None => (Tracker::default(), new),
        };
        let update = tracker.push(new, rules);
        dues.push(tracker.current(rules).due(rules));
        healths.push(serde_json::to_value(&tracker).expect("a tracker serialises"));
        firsts.push(update.first_seq as i64);
        for x in update.transitions {
            t.push(&sid, x);
        }
        sessions.push(sid);
    }
    sqlx::query(
        "UPDATE sessions s SET health = u.h, stall_due_at = u.d
         FROM unnest($2::text[], $3::jsonb[], $4::timestamptz[]) AS u(id, h, d)
         WHERE s.tenant_id = $1 AND s.session_id = u.id",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .bind(&healths)
    .bind(&dues)
    .execute(&mut **tx)
    .await?;
    sqlx::query(
        "DELETE FROM status_transitions t USING unnest($2::text[], $3::int8[]) AS u(id, first)
         WHERE t.tenant_id = $1 AND t.session_id = u.id AND t.seq >= u.first",
    )
    .bind(tenant_id)
    .bind(&sessions)
    .bind(&firsts)
    .execute(&mut **tx)
    .await?;
    if !t.session.is_empty() {
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
    }
    Ok(())
}

/// Transitions as columns, for one `unnest` insert.
#[derive(Default)]
struct TransitionRows {
    session: Vec<String>,
    seq: Vec<i64>,
    at: Vec<DateTime<Utc>>,
    from: Vec<Option<&'static str>>,
    to: Vec<&'static str>,
    cause: Vec<String>,
}

impl TransitionRows {
    fn push(&mut self, session: &str, x: apiary_schema::status::Transition) {
        self.session.push(session.to_string());
        self.seq.push(x.seq as i64);
        self.at.push(x.at);
        self.from.push(x.from.map(|s| s.as_str()));
        self.to.push(x.to.as_str());
        self.cause.push(x.cause);
    }
}

/// Every stored event of a session as health inputs, in time order (the rebuild of a session stored
/// before the health model existed).
async fn stored_inputs(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    session: &str,
) -> Result<Vec<Input>, sqlx::Error> {
    let rows: Vec<(Uuid, DateTime<Utc>, String, serde_json::Value)> = sqlx::query_as(
        "SELECT event_id, effective_at, kind, data FROM events
         WHERE tenant_id = $1 AND session_id = $2 ORDER BY effective_at, event_id",
    )
    .bind(tenant_id)
    .bind(session)
    .fetch_all(&mut **tx)
    .await?;
    let empty = serde_json::Map::new();
    Ok(rows
        .into_iter()
        .filter_map(|(id, at, kind, data)| {
            let kind = EventKind::parse(&kind)?;
            Some(Input {
                at,
                id,
                what: What::from_data(kind, data.as_object().unwrap_or(&empty)),
            })
        })
        .collect())
}
