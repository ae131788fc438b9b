//! What a session is working on (tasks, triggers, the tool call in flight) in a batch's transaction: the
//! batch's new events of the kinds [`apiary_schema::work::reads`] are folded into each session's stored
//! [`Work`] (`sessions.work`) by the shared rule, and the result rides the session upsert.
//!
//! - The session rows were locked in step 1 ([`super::owners::claim`]), so two batches of one session fold
//!   one after the other. The fold is order-independent and idempotent, so a late or repeated event gives
//!   the state a single ordered pass would.
//! - A session stored before `sessions.work` existed (NULL, events stored), or whose work cannot be read,
//!   is folded from its stored events of those kinds once, the first time a batch touches it.
//! - Bounded: the shared fold keeps at most 500 tasks, 100 triggers and 32 tool calls per session.
//! - Cost: one more column in the `SELECT` of the sessions' trackers ([`super::health::prepare`]), and
//!   one more array in the session upsert.

use std::collections::BTreeMap;

use apiary_schema::work::{self, Fact, Work};
use apiary_schema::EventKind;
use chrono::{DateTime, Utc};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::intake::ReadyEvent;

/// The batch's new events of the kinds the work fold reads, per session (sorted by session id).
pub fn touched<'e>(events: &[&'e ReadyEvent]) -> BTreeMap<&'e str, Vec<&'e ReadyEvent>> {
    let mut by_session: BTreeMap<&str, Vec<&ReadyEvent>> = BTreeMap::new();
    for e in events.iter().filter(|e| work::reads(e.event.kind)) {
        if let Some(s) = &e.event.session_id {
            by_session.entry(s.as_str()).or_default().push(e);
        }
    }
    by_session
}

/// Folds the batch's new events ([`touched`]) into their sessions' stored work (`stored`: session,
/// `sessions.work`, events — read with the trackers, [`super::health::prepare`]); returns each touched
/// session's work as JSON text (`sessions.work`), for the session upsert.
pub async fn prepare(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    by_session: &BTreeMap<&str, Vec<&ReadyEvent>>,
    stored: Vec<(String, Option<String>, i64)>,
) -> Result<BTreeMap<String, String>, sqlx::Error> {
    let mut out = BTreeMap::new();
    for (sid, stored, stored_events) in stored {
        let parsed = stored
            .as_deref()
            .and_then(|t| serde_json::from_str::<Work>(t).ok());
        let mut w = match parsed {
            Some(w) => w,
            None if stored_events > 0 => rebuild(tx, tenant_id, &sid).await?,
            None => Work::default(),
        };
        for e in by_session.get(sid.as_str()).into_iter().flatten() {
            w.fold(&e.event, e.effective_at);
        }
        out.insert(
            sid,
            serde_json::to_string(&w).expect("a session's work serialises"),
        );
    }
    Ok(out)
}

/// A stored event as the fold reads it: id, effective time, kind, execution id, data.
type StoredFact = (
    Uuid,
    DateTime<Utc>,
    String,
    Option<String>,
    serde_json::Value,
);

/// The work folded from every stored event of a session (a session stored before `sessions.work`).
async fn rebuild(
    tx: &mut Transaction<'_, Postgres>,
    tenant_id: Uuid,
    session: &str,
) -> Result<Work, sqlx::Error> {
    let kinds: Vec<&str> = EventKind::ALL
        .iter()
        .filter(|k| work::reads(**k))
        .map(|k| k.as_str())
        .collect();
    let rows: Vec<StoredFact> = sqlx::query_as(
        "SELECT event_id, effective_at, kind, execution_id, data FROM events
             WHERE tenant_id = $1 AND session_id = $2 AND kind = ANY($3)",
    )
    .bind(tenant_id)
    .bind(session)
    .bind(&kinds)
    .fetch_all(&mut **tx)
    .await?;
    let empty = serde_json::Map::new();
    let mut w = Work::default();
    for (id, at, kind, execution_id, data) in &rows {
        if let Some(kind) = EventKind::parse(kind) {
            let fact = Fact {
                kind,
                id: *id,
                execution_id: execution_id.as_deref(),
                data: data.as_object().unwrap_or(&empty),
            };
            w.fold_parts(&fact, *at);
        }
    }
    Ok(w)
}
