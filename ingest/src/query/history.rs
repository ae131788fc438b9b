//! Status history reads: one session's transitions (`GET /v1/sessions/{id}/history`) and the tenant's
//! transitions in a time range (`GET /v1/status/transitions`).
//!
//! Stored transitions come from `status_transitions` (written by the batches, [`crate::store::health`]).
//! A transition caused by time alone after a session's last event (no progress for `stall_after`) is not
//! stored until the next event arrives; it is derived here, at the instant it happened, from the stored
//! tracker — the same instant the next batch will store it at, so a reader sees one transition either
//! way. The session read also shows the liveness overlay (`offline` since the device fell silent). Past
//! offline periods are not kept: the agent buffers while offline, so the events that arrive afterwards fill
//! that time with what the session really did.

use apiary_schema::status::Rules;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::sessions::SessionRow;
use crate::status::{self, Status, Transition};

/// Most transitions one read returns.
pub const MAX_TRANSITIONS: usize = 10_000;

type Row = (String, i64, DateTime<Utc>, Option<String>, String, String);

fn row_json(
    session: Option<&str>,
    at: DateTime<Utc>,
    from: Option<&str>,
    to: &str,
    cause: &str,
) -> Value {
    let mut v = json!({ "at": at, "from": from, "to": to, "cause": cause });
    if let Some(s) = session {
        v["session_id"] = s.into();
    }
    v
}

fn transition_json(session: Option<&str>, t: &Transition) -> Value {
    row_json(
        session,
        t.at,
        t.from.map(Status::as_str),
        t.to.as_str(),
        &t.cause,
    )
}

/// A session's whole history, oldest first (at most [`MAX_TRANSITIONS`], then `truncated`), the
/// transitions derived since its last event, and its time in each status.
pub async fn session_history(
    pool: &PgPool,
    r: &TenantRead,
    row: &SessionRow,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<Value, ApiError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT session_id, seq, at, from_status, to_status, cause FROM status_transitions
         WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq LIMIT $3",
    )
    .bind(r.tenant_id())
    .bind(&row.session_id)
    .bind(MAX_TRANSITIONS as i64 + 1)
    .fetch_all(pool)
    .await?;
    let truncated = rows.len() > MAX_TRANSITIONS;
    let mut list: Vec<Value> = rows
        .iter()
        .take(MAX_TRANSITIONS)
        .map(|(_, _, at, from, to, cause)| row_json(None, *at, from.as_deref(), to, cause))
        .collect();
    let view = row.view(now, rules);
    if !truncated {
        list.extend(view.derived.iter().map(|t| transition_json(None, t)));
    }
    Ok(json!({
        "session_id": row.session_id,
        "status": view.status,
        "transitions": list,
        "truncated": truncated,
        "time_in_state": view.time_in_state,
    }))
}

/// What `GET /v1/status/transitions` asks for.
#[derive(Debug, Clone)]
pub struct TransitionFilter {
    pub from: DateTime<Utc>,
    /// Exclusive.
    pub to: DateTime<Utc>,
    /// Only transitions into one of these.
    pub statuses: Option<Vec<Status>>,
    pub limit: usize,
}

/// The tenant's transitions with `from <= at < to`, oldest first: the stored ones and the no-progress
/// ones derived from sessions that went quiet. Offline periods are a liveness overlay of each session's
/// current status and are not listed here.
pub async fn tenant_transitions(
    pool: &PgPool,
    r: &TenantRead,
    f: &TransitionFilter,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<Value, ApiError> {
    let names: Option<Vec<&str>> = f
        .statuses
        .as_ref()
        .map(|v| v.iter().map(|s| s.as_str()).collect());
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT t.session_id, t.seq, t.at, t.from_status, t.to_status, t.cause
         FROM status_transitions t JOIN sessions s ON s.tenant_id = t.tenant_id AND s.session_id = t.session_id
         WHERE t.tenant_id = $1 AND t.at >= $2 AND t.at < $3 AND ($4::text IS NULL OR s.user_id = $4)
           AND ($5::text[] IS NULL OR t.to_status = ANY($5))
         ORDER BY t.at, t.session_id, t.seq LIMIT $6",
    )
    .bind(r.tenant_id())
    .bind(f.from)
    .bind(f.to)
    .bind(r.user())
    .bind(&names)
    .bind(f.limit as i64 + 1)
    .fetch_all(pool)
    .await?;
    let mut all: Vec<(DateTime<Utc>, String, i64, Value)> = rows
        .into_iter()
        .map(|(sid, seq, at, from, to, cause)| {
            let v = row_json(Some(&sid), at, from.as_deref(), &to, &cause);
            (at, sid, seq, v)
        })
        .collect();
    // Sessions whose no-progress rule fired inside the range after their last event.
    let quiet: Vec<(String, Option<Value>)> = sqlx::query_as(
        "SELECT session_id, health FROM sessions
         WHERE tenant_id = $1 AND stall_due_at >= $2 AND stall_due_at < LEAST($3, $4)
           AND ($5::text IS NULL OR user_id = $5)
         ORDER BY stall_due_at, session_id LIMIT $6",
    )
    .bind(r.tenant_id())
    .bind(f.from)
    .bind(f.to)
    .bind(now)
    .bind(r.user())
    .bind(f.limit as i64 + 1)
    .fetch_all(pool)
    .await?;
    for (sid, health) in quiet {
        let mut h = status::tracker(health.as_ref()).current(rules);
        let mut derived = Vec::new();
        h.advance(now.min(f.to), rules, &mut derived);
        for t in derived.iter().filter(|t| t.at >= f.from && t.at < f.to) {
            if f.statuses.as_ref().is_none_or(|s| s.contains(&t.to)) {
                all.push((
                    t.at,
                    sid.clone(),
                    t.seq as i64,
                    transition_json(Some(&sid), t),
                ));
            }
        }
    }
    all.sort_by(|a, b| (a.0, &a.1, a.2).cmp(&(b.0, &b.1, b.2)));
    let truncated = all.len() > f.limit;
    all.truncate(f.limit);
    Ok(json!({
        "from": f.from, "to": f.to,
        "transitions": all.into_iter().map(|x| x.3).collect::<Vec<_>>(),
        "truncated": truncated,
    }))
}
