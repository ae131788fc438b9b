//! Session reads: one session with its derived status and totals, and the queen → colonies → workers tree
//! with usage rolled up. Every query takes a [`TenantRead`]: bound to its tenant (and, for a user-bound
//! `read` token, to its user); a session of another tenant or user is "not found".

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sqlx::{PgPool, Row};

use super::sums;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::query::usage::usage_json;
use crate::rollups::Usage;
use apiary_schema::status::Rules;

use crate::status::{self, Status, View};

/// A stored session joined with its device's liveness.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SessionRow {
    pub session_id: String,
    pub user_id: String,
    pub device_id: String,
    pub parent_session_id: Option<String>,
    pub colony_id: Option<String>,
    pub agent_role: Option<String>,
    pub worker_id: Option<String>,
    pub runtime: Option<String>,
    pub first_seen_at: DateTime<Utc>,
    pub last_event_at: Option<DateTime<Utc>>,
    pub last_progress_at: Option<DateTime<Utc>>,
    pub phase: Option<String>,
    pub input_state: Option<String>,
    pub input_at: Option<DateTime<Utc>>,
    pub status: Option<String>,
    pub health_signal: Option<String>,
    pub health_at: Option<DateTime<Utc>>,
    pub device_heard_at: Option<DateTime<Utc>>,
    /// The health tracker (`sessions.health`).
    pub health: Option<Value>,
}

const SELECT: &str = "SELECT s.session_id, s.user_id, s.device_id, s.parent_session_id, s.colony_id, s.agent_role,
    s.worker_id, s.runtime, s.first_seen_at, s.last_event_at, s.last_progress_at, s.phase, s.input_state,
    s.input_at, s.status, s.health_signal, s.health_at,
    GREATEST(d.last_heartbeat_at, d.last_seen_at) AS device_heard_at, s.health
  FROM sessions s LEFT JOIN devices d ON d.tenant_id = s.tenant_id AND d.device_id = s.device_id";

impl SessionRow {
    /// The status at `now` (the shared health model, time let pass, the device's liveness applied).
    pub fn view(&self, now: DateTime<Utc>, rules: &Rules) -> View {
        status::session_view(self.health.as_ref(), self.device_heard_at, now, rules)
    }

    /// The session as JSON, with its status, time in each status and the given totals.
    pub fn to_json(&self, now: DateTime<Utc>, rules: &Rules, totals: &Usage) -> Value {
        let view = self.view(now, rules);
        let opt = |s: &str| {
            if s.is_empty() {
                Value::Null
            } else {
                Value::String(s.to_string())
            }
        };
        json!({
            "session_id": self.session_id, "user_id": opt(&self.user_id), "device_id": opt(&self.device_id),
            "parent_session_id": self.parent_session_id, "colony_id": self.colony_id,
            "agent_role": self.agent_role, "worker_id": self.worker_id, "runtime": self.runtime,
            "phase": self.phase, "status": view.status, "status_since": view.since,
            "status_cause": view.cause, "time_in_state": view.time_in_state,
            "lifecycle": self.status, "input_state": self.input_state,
            "health": { "signal": self.health_signal, "at": self.health_at },
            "first_seen_at": self.first_seen_at, "last_event_at": self.last_event_at,
            "last_progress_at": self.last_progress_at, "device_last_heard_at": self.device_heard_at,
            "totals": usage_json(totals),
        })
    }
}

/// One session the reader may see, or 404.
pub async fn get(pool: &PgPool, r: &TenantRead, id: &str) -> Result<SessionRow, ApiError> {
    sqlx::query_as::<_, SessionRow>(&format!(
        "{SELECT} WHERE s.tenant_id = $1 AND s.session_id = $2 AND ($3::text IS NULL OR s.user_id = $3)"
    ))
    .bind(r.tenant_id())
    .bind(id)
    .bind(r.user())
    .fetch_optional(pool)
    .await?
    .ok_or(ApiError::NotFound("session"))
}

/// Where a page of [`list`] ended: the sort key of the last session looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    pub at: DateTime<Utc>,
    pub session_id: String,
}

impl Cursor {
    /// Opaque to clients: Unix microseconds, a dot, the session id.
    pub fn encode(&self) -> String {
        format!("{}.{}", self.at.timestamp_micros(), self.session_id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (micros, id) = s.split_once('.')?;
        let at = DateTime::from_timestamp_micros(micros.parse().ok()?)?;
        (!id.is_empty() && id.len() <= 200).then(|| Cursor {
            at,
            session_id: id.to_string(),
        })
    }

    fn of(r: &SessionRow) -> Cursor {
        Cursor {
            at: r.last_event_at.unwrap_or(r.first_seen_at),
            session_id: r.session_id.clone(),
        }
    }
}

/// What `GET /v1/sessions` asks for.
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    pub user: Option<String>,
    pub device: Option<String>,
    /// Only sessions with an event (or, without events, first seen) at or after this time.
    pub since: Option<DateTime<Utc>>,
    /// Only sessions whose derived status is one of these.
    pub statuses: Option<Vec<Status>>,
    pub limit: usize,
    pub after: Option<Cursor>,
}

/// Most sessions one request looks at when a status filter skips some: a page can come back short (even
/// empty) with a cursor to go on from, instead of one request scanning a whole large tenant.
const LIST_SCAN_MAX: usize = 10_000;
/// Sessions fetched per query while a status filter is on.
const LIST_CHUNK: usize = 500;

/// The sessions the reader may see, most recently active first: ordered by the last event's
/// time (the first-seen time for a session registered without events), then by id, both descending.
/// Status is derived here, at `now`, so the status filter runs after the query. Returns the page and,
/// when there may be more, the cursor to pass on.
pub async fn list(
    pool: &PgPool,
    r: &TenantRead,
    f: &ListFilter,
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<(Vec<SessionRow>, Option<Cursor>), ApiError> {
    let mut out = Vec::new();
    let mut after = f.after.clone();
    let mut scanned = 0usize;
    loop {
        let fetch = match f.statuses {
            None => f.limit + 1 - out.len(),
            Some(_) => LIST_CHUNK,
        };
        let mut q = sqlx::QueryBuilder::<sqlx::Postgres>::new(SELECT);
        q.push(" WHERE s.tenant_id = ").push_bind(r.tenant_id());
        for (col, v) in [
            ("s.user_id", r.user()),
            ("s.user_id", f.user.as_deref()),
            ("s.device_id", f.device.as_deref()),
        ] {
            if let Some(v) = v {
                q.push(format!(" AND {col} = ")).push_bind(v.to_string());
            }
        }
        if let Some(since) = f.since {
            q.push(" AND COALESCE(s.last_event_at, s.first_seen_at) >= ")
                .push_bind(since);
        }
        if let Some(c) = &after {
            q.push(" AND (COALESCE(s.last_event_at, s.first_seen_at), s.session_id) < (")
                .push_bind(c.at)
                .push(", ")
                .push_bind(c.session_id.clone())
                .push(")");
        }
        q.push(
            " ORDER BY COALESCE(s.last_event_at, s.first_seen_at) DESC, s.session_id DESC LIMIT ",
        )
        .push_bind(fetch as i64);
        let rows: Vec<SessionRow> = q.build_query_as().fetch_all(pool).await?;
        let exhausted = rows.len() < fetch;
        let mut last = None;
        for r in rows {
            if out.len() == f.limit {
                return Ok((out, last.or(after)));
            }
            scanned += 1;
            last = Some(Cursor::of(&r));
            if f.statuses
                .as_ref()
                .is_none_or(|s| s.contains(&r.view(now, rules).status))
            {
                out.push(r);
            }
        }
        if exhausted {
            return Ok((out, None));
        }
        after = last.or(after);
        if scanned >= LIST_SCAN_MAX {
            return Ok((out, after));
        }
    }
}

/// All-time totals per session (of the sessions the reader may see; exact whatever their size, see
/// [`sums`]).
pub async fn totals(
    pool: &PgPool,
    r: &TenantRead,
    ids: &[String],
) -> Result<HashMap<String, Usage>, ApiError> {
    for wide in [false, true] {
        let sql = format!(
            "SELECT session_id, {} FROM usage_rollups WHERE tenant_id = $1 AND session_id = ANY($2) \
             AND ($3::text IS NULL OR user_id = $3) GROUP BY session_id",
            sums::select(wide)
        );
        match sqlx::query(&sql)
            .bind(r.tenant_id())
            .bind(ids)
            .bind(r.user())
            .fetch_all(pool)
            .await
        {
            Ok(rows) => {
                return rows
                    .iter()
                    .map(|r| Ok((r.try_get::<String, _>(0)?, sums::usage_at(r, 1)?)))
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(ApiError::from)
            }
            Err(e) if !wide && sums::is_out_of_range(&e) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    unreachable!("the exact form never reports out of range")
}

/// The session and everything below it (children by parent or colony), at most 8 levels deep; for a
/// user-bound reader only that user's sessions (and 404 when the root is not one of them).
pub async fn subtree(
    pool: &PgPool,
    r: &TenantRead,
    root: &str,
) -> Result<Vec<SessionRow>, ApiError> {
    let sql = format!(
        "WITH RECURSIVE t(session_id, depth) AS (
            SELECT session_id, 0 FROM sessions WHERE tenant_id = $1 AND session_id = $2
          UNION
            SELECT s.session_id, t.depth + 1 FROM sessions s JOIN t
              ON s.tenant_id = $1 AND s.session_id <> t.session_id
             AND (s.parent_session_id = t.session_id OR s.colony_id = t.session_id)
            WHERE t.depth < 8)
         {SELECT} WHERE s.tenant_id = $1 AND s.session_id IN (SELECT session_id FROM t)
            AND ($3::text IS NULL OR s.user_id = $3)"
    );
    let rows = sqlx::query_as::<_, SessionRow>(&sql)
        .bind(r.tenant_id())
        .bind(root)
        .bind(r.user())
        .fetch_all(pool)
        .await?;
    if !rows.iter().any(|r| r.session_id == root) {
        return Err(ApiError::NotFound("session"));
    }
    Ok(rows)
}

/// Builds the tree JSON: each node has its own `usage`, `totals` (itself and everything below) and its
/// children grouped by colony.
pub fn tree_json(
    root: &str,
    rows: &[SessionRow],
    usage: &HashMap<String, Usage>,
    now: DateTime<Utc>,
    t: &Rules,
) -> Value {
    let by_id: HashMap<&str, &SessionRow> =
        rows.iter().map(|r| (r.session_id.as_str(), r)).collect();
    let mut children: HashMap<&str, Vec<&SessionRow>> = HashMap::new();
    for r in rows {
        let parent = r.parent_session_id.as_deref().or(r.colony_id.as_deref());
        if let Some(p) = parent.filter(|p| *p != r.session_id && by_id.contains_key(p)) {
            if r.session_id != root {
                children.entry(p).or_default().push(r);
            }
        }
    }
    fn node(
        r: &SessionRow,
        children: &HashMap<&str, Vec<&SessionRow>>,
        usage: &HashMap<String, Usage>,
        now: DateTime<Utc>,
        t: &Rules,
        depth: usize,
    ) -> (Value, Usage) {
        let own = usage.get(&r.session_id).copied().unwrap_or_default();
        let mut total = own;
        let mut colonies: BTreeMap<String, (Vec<Value>, Usage)> = BTreeMap::new();
        for c in children.get(r.session_id.as_str()).into_iter().flatten() {
            if depth >= 8 {
                break;
            }
            let (v, sub) = node(c, children, usage, now, t, depth + 1);
            total.add(&sub);
            let key = c.colony_id.clone().unwrap_or_else(|| r.session_id.clone());
            let entry = colonies.entry(key).or_default();
            entry.0.push(v);
            entry.1.add(&sub);
        }
        let mut v = r.to_json(now, t, &own);
        v["usage"] = Value::Object(usage_json(&own));
        v["totals"] = Value::Object(usage_json(&total));
        v["colonies"] = colonies
            .into_iter()
            .map(|(id, (workers, u))| json!({ "colony_id": id, "totals": usage_json(&u), "workers": workers }))
            .collect();
        (v, total)
    }
    match by_id.get(root) {
        Some(r) => node(r, &children, usage, now, t, 0).0,
        None => Value::Null,
    }
}

/// True when the reader may see a session in, or usage for, the colony.
pub async fn colony_exists(pool: &PgPool, r: &TenantRead, colony: &str) -> Result<bool, ApiError> {
    let found: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant_id = $1 AND (colony_id = $2 OR session_id = $2)
                AND ($3::text IS NULL OR user_id = $3))
             OR EXISTS (SELECT 1 FROM usage_rollups WHERE tenant_id = $1 AND colony_id = $2
                AND ($3::text IS NULL OR user_id = $3))",
    )
    .bind(r.tenant_id())
    .bind(colony)
    .bind(r.user())
    .fetch_one(pool)
    .await?;
    Ok(found)
}
