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

use std::collections::BTreeMap;

use apiary_schema::status::Rules;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use super::params::{parsed, Limit, Rfc3339, Statuses};
use super::sessions::body::{nullable_status_schema, status_schema, time_in_state_schema};
use super::ReadDb;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::sessions::SessionRow;
use crate::status::{self, Status, Transition};

/// Most transitions one read returns.
pub const MAX_TRANSITIONS: usize = 10_000;

/// A stored transition.
#[derive(Debug, sqlx::FromRow)]
struct Row {
    session_id: String,
    seq: i64,
    at: DateTime<Utc>,
    from_status: Option<String>,
    to_status: String,
    cause: String,
}

/// One status transition of a session.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TransitionBody {
    pub at: DateTime<Utc>,
    /// The status before (null for the session's first).
    #[schema(schema_with = nullable_status_schema)]
    pub from: Option<String>,
    #[schema(schema_with = status_schema)]
    pub to: String,
    pub cause: String,
}

impl TransitionBody {
    fn stored(r: Row) -> TransitionBody {
        TransitionBody {
            at: r.at,
            from: r.from_status,
            to: r.to_status,
            cause: r.cause,
        }
    }

    fn derived(t: &Transition) -> TransitionBody {
        TransitionBody {
            at: t.at,
            from: t.from.map(|s| s.as_str().to_string()),
            to: t.to.as_str().to_string(),
            cause: t.cause.clone(),
        }
    }
}

/// `GET /v1/sessions/{id}/history`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct SessionHistory {
    pub session_id: String,
    /// The status now.
    #[schema(schema_with = status_schema)]
    pub status: Status,
    /// Oldest first.
    pub transitions: Vec<TransitionBody>,
    /// True when there were more than 10,000 (the derived ones are then left out too).
    pub truncated: bool,
    #[schema(schema_with = time_in_state_schema)]
    pub time_in_state: BTreeMap<Status, f64>,
}

/// A transition of one of the tenant's sessions.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TenantTransition {
    pub session_id: String,
    #[serde(flatten)]
    pub transition: TransitionBody,
}

/// `GET /v1/status/transitions`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TransitionPage {
    pub from: DateTime<Utc>,
    /// Exclusive.
    pub to: DateTime<Utc>,
    /// Oldest first (by time, session, position).
    pub transitions: Vec<TenantTransition>,
    /// True when more than `limit` matched.
    pub truncated: bool,
}

/// A session's whole history, oldest first (at most [`MAX_TRANSITIONS`], then `truncated`), the
/// transitions derived since its last event, and its time in each status.
pub async fn session_history(
    db: &ReadDb,
    r: &TenantRead,
    row: &SessionRow,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<SessionHistory, ApiError> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT session_id, seq, at, from_status, to_status, cause FROM status_transitions
         WHERE tenant_id = $1 AND session_id = $2 ORDER BY seq LIMIT $3",
    )
    .bind(r.tenant_id())
    .bind(&row.session_id)
    .bind(MAX_TRANSITIONS as i64 + 1)
    .fetch_all(&db.pool)
    .await?;
    let truncated = rows.len() > MAX_TRANSITIONS;
    let mut list: Vec<TransitionBody> = rows
        .into_iter()
        .take(MAX_TRANSITIONS)
        .map(TransitionBody::stored)
        .collect();
    let view = row.view(now, rules);
    if !truncated {
        list.extend(view.derived.iter().map(TransitionBody::derived));
    }
    Ok(SessionHistory {
        session_id: row.session_id.clone(),
        status: view.status,
        transitions: list,
        truncated,
        time_in_state: view.time_in_state,
    })
}

/// Default number of transitions of `GET /v1/status/transitions`.
pub const DEFAULT_LIMIT: usize = 1000;

/// The query string of `GET /v1/status/transitions`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct TransitionParams {
    /// RFC 3339. Default: `to` minus 24 hours.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub from: Option<Rfc3339>,
    /// RFC 3339, exclusive. Default: now.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub to: Option<Rfc3339>,
    /// Comma-separated: only transitions into these statuses.
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<String>)]
    pub status: Option<Statuses>,
    /// 1 to 10,000 (default 1,000).
    #[serde(default, deserialize_with = "parsed")]
    #[param(value_type = Option<u32>, minimum = 1, maximum = 10000)]
    pub limit: Option<Limit<MAX_TRANSITIONS>>,
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

impl TransitionFilter {
    /// The defaults applied (`to` now, `from` a day before `to`); 400 unless `from` < `to`.
    pub fn from_params(
        p: TransitionParams,
        now: DateTime<Utc>,
    ) -> Result<TransitionFilter, ApiError> {
        let to = p.to.map_or(now, |t| t.0);
        let from = p.from.map_or(to - chrono::Duration::hours(24), |t| t.0);
        if from >= to {
            return Err(ApiError::bad_param("from", "must be before `to`"));
        }
        Ok(TransitionFilter {
            from,
            to,
            statuses: p.status.map(|s| s.0),
            limit: p.limit.map_or(DEFAULT_LIMIT, |l| l.0),
        })
    }
}

/// A session whose no-progress rule fired after its last event.
#[derive(Debug, sqlx::FromRow)]
struct Quiet {
    session_id: String,
    health: Option<serde_json::Value>,
}

/// A transition and its position in its session's history (the last sort key).
type Positioned = (i64, TenantTransition);

/// The tenant's transitions with `from <= at < to`, oldest first: the stored ones and the no-progress
/// ones derived from sessions that went quiet. Offline periods are a liveness overlay of each session's
/// current status and are not listed here.
pub async fn tenant_transitions(
    db: &ReadDb,
    r: &TenantRead,
    f: &TransitionFilter,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<TransitionPage, ApiError> {
    let mut all = stored_transitions(db, r, f).await?;
    all.extend(derived_transitions(db, r, f, now, rules).await?);
    all.sort_by(|(sa, a), (sb, b)| {
        (a.transition.at, &a.session_id, sa).cmp(&(b.transition.at, &b.session_id, sb))
    });
    let truncated = all.len() > f.limit;
    all.truncate(f.limit);
    Ok(TransitionPage {
        from: f.from,
        to: f.to,
        transitions: all.into_iter().map(|(_, t)| t).collect(),
        truncated,
    })
}

/// The stored transitions in the range (at most `limit + 1`).
async fn stored_transitions(
    db: &ReadDb,
    r: &TenantRead,
    f: &TransitionFilter,
) -> Result<Vec<Positioned>, ApiError> {
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
    .fetch_all(&db.pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            let (seq, session_id) = (r.seq, r.session_id.clone());
            let transition = TransitionBody::stored(r);
            let t = TenantTransition {
                session_id,
                transition,
            };
            (seq, t)
        })
        .collect())
}

/// The no-progress transitions that fired inside the range after a session's last event (not stored
/// until its next event arrives).
async fn derived_transitions(
    db: &ReadDb,
    r: &TenantRead,
    f: &TransitionFilter,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<Vec<Positioned>, ApiError> {
    let quiet: Vec<Quiet> = sqlx::query_as(
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
    .fetch_all(&db.pool)
    .await?;
    let mut out = vec![];
    for q in quiet {
        let mut h = status::tracker(q.health.as_ref()).current(rules);
        let mut derived = Vec::new();
        h.advance(now.min(f.to), rules, &mut derived);
        let wanted = |t: &&Transition| {
            t.at >= f.from && t.at < f.to && f.statuses.as_ref().is_none_or(|s| s.contains(&t.to))
        };
        for t in derived.iter().filter(wanted) {
            let transition = TransitionBody::derived(t);
            let session_id = q.session_id.clone();
            out.push((
                t.seq as i64,
                TenantTransition {
                    session_id,
                    transition,
                },
            ));
        }
    }
    Ok(out)
}
