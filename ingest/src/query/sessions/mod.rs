//! Session reads: one session with its derived status and totals, and the queen → colonies → workers tree
//! with usage rolled up. Every query takes a [`TenantRead`]: bound to its tenant (and, for a user-bound
//! `read` token, to its user); a session of another tenant or user is "not found".

pub mod body;
pub mod detail;
pub mod list;
pub mod work;

use std::collections::{BTreeMap, HashMap};

use apiary_schema::status::{Rules, Status};
use chrono::{DateTime, Utc};
use serde_json::Value;

use super::sums::{self, SumColumns};
use super::ReadDb;
use crate::access::TenantRead;
use crate::error::ApiError;
use crate::rollups::Usage;
use crate::status::{self, View};

pub use body::{SessionBody, SessionPage, TreeNode};
pub use list::{Cursor, ListFilter, ListParams};

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
    /// When the device reported the session's runtime process gone (`crashed` overlay).
    pub runtime_gone_at: Option<DateTime<Utc>>,
    /// The health tracker (`sessions.health`).
    pub health: Option<Value>,
    /// Tasks, triggers and tool calls (`sessions.work`, [`apiary_schema::work::Work`]).
    pub work: Option<Value>,
}

/// A session's device is heard through the device's row of the session's user, or the row of senders
/// bound to no user (`''`, a tenant-wide sender's): a device id can have a row per user
/// ([`crate::store::device_owners`]), and another user's row of the same id says nothing about this one.
/// Every query that uses it binds the tenant as `$1` (the device subquery names `$1`, not `s.tenant_id`,
/// so Citus routes the whole query, recursive tree included, to the tenant's shard).
/// When session `s`'s device was last heard from by its user (the device's row for that user, or the
/// row without a user): what its status's `offline` overlay reads, in every read that derives a status.
macro_rules! device_heard_at {
    () => {
        "(SELECT max(GREATEST(d.last_heartbeat_at, d.last_seen_at)) FROM devices d
      WHERE d.tenant_id = $1 AND d.device_id = s.device_id AND d.user_id IN (s.user_id, ''))"
    };
}

pub(super) const SELECT: &str = concat!(
    "SELECT s.session_id, s.user_id, s.device_id, s.parent_session_id, s.colony_id, s.agent_role,
    s.worker_id, s.runtime, s.first_seen_at, s.last_event_at, s.last_progress_at, s.phase, s.input_state,
    s.input_at, s.status, s.health_signal, s.health_at, ",
    device_heard_at!(),
    " AS device_heard_at, s.runtime_gone_at, s.health, s.work
  FROM sessions s"
);

impl SessionRow {
    /// The status at `now` (the shared health model, time let pass, the device's liveness applied).
    pub fn view(&self, now: DateTime<Utc>, rules: &Rules) -> View {
        status::session_view(
            self.health.as_ref(),
            self.device_heard_at,
            self.runtime_gone_at,
            now,
            rules,
        )
    }

    /// [`SessionRow::view`] and the session's wall-clock and active time at `now`.
    pub fn view_and_durations(
        &self,
        now: DateTime<Utc>,
        rules: &Rules,
    ) -> (View, apiary_schema::status::Durations) {
        status::session_view_and_durations(
            self.health.as_ref(),
            self.device_heard_at,
            self.runtime_gone_at,
            now,
            rules,
        )
    }
}

/// One session the reader may see, or 404.
pub async fn get(db: &ReadDb, r: &TenantRead, id: &str) -> Result<SessionRow, ApiError> {
    sqlx::query_as::<_, SessionRow>(&format!(
        "{SELECT} WHERE s.tenant_id = $1 AND s.session_id = $2 AND ($3::text IS NULL OR s.user_id = $3)"
    ))
    .bind(r.tenant_id())
    .bind(id)
    .bind(r.user())
    .fetch_optional(&db.pool)
    .await?
    .ok_or(ApiError::NotFound("session"))
}

/// A session's id and its sums.
#[derive(Debug, sqlx::FromRow)]
struct SessionSums {
    session_id: String,
    #[sqlx(flatten)]
    sums: SumColumns,
}

/// All-time totals per session (of the sessions the reader may see; exact whatever their size, see
/// [`sums`]).
pub async fn totals(
    db: &ReadDb,
    r: &TenantRead,
    ids: &[String],
) -> Result<HashMap<String, Usage>, ApiError> {
    let statement = |wide: bool| {
        let mut q = sqlx::QueryBuilder::new("SELECT session_id, ");
        q.push(sums::select(wide))
            .push(" FROM usage_rollups WHERE tenant_id = ")
            .push_bind(r.tenant_id())
            .push(" AND session_id = ANY(")
            .push_bind(ids.to_vec())
            .push(")");
        if let Some(u) = r.user() {
            q.push(" AND user_id = ").push_bind(u.to_string());
        }
        q.push(" GROUP BY session_id");
        q
    };
    let rows: Vec<SessionSums> = match statement(false).build_query_as().fetch_all(&db.pool).await {
        Err(e) if sums::is_out_of_range(&e) => {
            statement(true).build_query_as().fetch_all(&db.pool).await?
        }
        r => r?,
    };
    Ok(rows
        .into_iter()
        .map(|r| (r.session_id, r.sums.usage()))
        .collect())
}

/// The sessions right below `t.session_id` (of tenant `$1`), for the recursive step of a walk down a tree:
/// by parent, by colony, or forked from it (a fork's session must exist). Three lookups, each through its
/// own index; one join with the three conditions OR'ed read every session of the tenant at each step.
const CHILDREN: &str = "
    SELECT s.session_id FROM sessions s WHERE s.tenant_id = $1 AND s.parent_session_id = t.session_id
  UNION ALL
    SELECT s.session_id FROM sessions s WHERE s.tenant_id = $1 AND s.colony_id = t.session_id
  UNION ALL
    SELECT f.session_id FROM session_forks f JOIN sessions s
      ON s.tenant_id = $1 AND s.session_id = f.session_id
    WHERE f.tenant_id = $1 AND f.parent_session_id = t.session_id";

/// The session and everything below it (children by parent, colony or fork), at most 8 levels deep; for a
/// user-bound reader only that user's sessions (and 404 when the root is not one of them).
pub async fn subtree(db: &ReadDb, r: &TenantRead, root: &str) -> Result<Vec<SessionRow>, ApiError> {
    let sql = format!(
        "WITH RECURSIVE t(session_id, depth) AS (
            SELECT session_id, 0 FROM sessions WHERE tenant_id = $1 AND session_id = $2
          UNION
            SELECT c.session_id, t.depth + 1 FROM t CROSS JOIN LATERAL ({CHILDREN}) c
            WHERE t.depth < 8 AND c.session_id <> t.session_id)
         {SELECT} WHERE s.tenant_id = $1 AND s.session_id IN (SELECT session_id FROM t)
            AND ($3::text IS NULL OR s.user_id = $3)"
    );
    let rows = sqlx::query_as::<_, SessionRow>(&sql)
        .bind(r.tenant_id())
        .bind(root)
        .bind(r.user())
        .fetch_all(&db.pool)
        .await?;
    if !rows.iter().any(|r| r.session_id == root) {
        return Err(ApiError::NotFound("session"));
    }
    Ok(rows)
}

/// The topmost session above `id` that the reader may see: up by parent, else colony, else the session
/// it was forked from (the tree's own rule, [`body::tree`]), at most 8 levels; `id` itself when nothing
/// visible is above it.
pub async fn root_of(db: &ReadDb, r: &TenantRead, id: &str) -> Result<String, ApiError> {
    let root: Option<String> = sqlx::query_scalar(
        "WITH RECURSIVE up(session_id, depth) AS (
            SELECT $2::text, 0
          UNION
            SELECT COALESCE(s.parent_session_id, s.colony_id, f.parent_session_id), up.depth + 1
            FROM up JOIN sessions s ON s.tenant_id = $1 AND s.session_id = up.session_id
              LEFT JOIN session_forks f ON f.tenant_id = $1 AND f.session_id = s.session_id
            WHERE up.depth < 8
              AND COALESCE(s.parent_session_id, s.colony_id, f.parent_session_id) <> up.session_id
              AND EXISTS (SELECT 1 FROM sessions v WHERE v.tenant_id = $1
                AND v.session_id = COALESCE(s.parent_session_id, s.colony_id, f.parent_session_id)
                AND ($3::text IS NULL OR v.user_id = $3)))
         SELECT session_id FROM up ORDER BY depth DESC LIMIT 1",
    )
    .bind(r.tenant_id())
    .bind(id)
    .bind(r.user())
    .fetch_optional(&db.pool)
    .await?;
    Ok(root.unwrap_or_else(|| id.to_string()))
}

/// A session below another, with what its status is derived from.
#[derive(Debug, sqlx::FromRow)]
struct BelowRow {
    /// The session of the page it is below.
    above: String,
    health: Option<Value>,
    device_heard_at: Option<DateTime<Utc>>,
    runtime_gone_at: Option<DateTime<Utc>>,
}

/// For each of `ids`, the statuses at `now` of the sessions below it (its colonies' runs and workers
/// at any depth, at most 8 levels: the sessions [`subtree`] finds), counted; sessions with nothing
/// below are left out.
///
/// Each session found is then read by its key, a lateral lookup (`LIMIT 1`, so that the planner keeps it
/// one: the key is the primary key): joined instead, the statement's generic
/// plan — which PostgreSQL may keep for a statement a pooled connection has run five times — hashed every
/// session of the tenant to find a few dozen (64 ms instead of under 1 for a queen's 50 workers at the
/// year bench's scale). Their devices are read as a session's own status reads them ([`SELECT`]).
pub async fn below(
    db: &ReadDb,
    r: &TenantRead,
    ids: &[String],
    now: DateTime<Utc>,
    rules: &Rules,
) -> Result<HashMap<String, BTreeMap<Status, u64>>, ApiError> {
    let sql = format!(
        "WITH RECURSIVE t(above, session_id, depth) AS (
            SELECT id, id, 0 FROM unnest($2::text[]) AS id
          UNION
            SELECT t.above, c.session_id, t.depth + 1 FROM t CROSS JOIN LATERAL ({CHILDREN}) c
            WHERE t.depth < 8 AND c.session_id <> t.session_id)
         SELECT b.above, s.health, s.device_heard_at, s.runtime_gone_at
         FROM (SELECT DISTINCT above, session_id FROM t WHERE session_id <> above) b
           CROSS JOIN LATERAL (
             SELECT s.health, s.runtime_gone_at, {heard} AS device_heard_at
             FROM sessions s
             WHERE s.tenant_id = $1 AND s.session_id = b.session_id
               AND ($3::text IS NULL OR s.user_id = $3)
             LIMIT 1) s",
        heard = device_heard_at!()
    );
    // The recursive walk's row estimates put the statement past `jit_above_cost`.
    let rows: Vec<BelowRow> = db
        .fetch_all_without_jit(
            sqlx::query_as(&sql)
                .bind(r.tenant_id())
                .bind(ids)
                .bind(r.user()),
        )
        .await?;
    let mut out: HashMap<String, BTreeMap<Status, u64>> = HashMap::new();
    for row in rows {
        let view = status::session_view(
            row.health.as_ref(),
            row.device_heard_at,
            row.runtime_gone_at,
            now,
            rules,
        );
        *out.entry(row.above)
            .or_default()
            .entry(view.status)
            .or_default() += 1;
    }
    Ok(out)
}

/// The forks and colony keys (with their names and labels) among `ids` (the sessions of a tree), see
/// [`body::TreeLinks`].
pub async fn links(
    db: &ReadDb,
    r: &TenantRead,
    ids: &[String],
) -> Result<body::TreeLinks, ApiError> {
    let forked_from = sqlx::query_as::<_, (String, String)>(
        "SELECT session_id, parent_session_id FROM session_forks WHERE tenant_id = $1 AND session_id = ANY($2)",
    )
    .bind(r.tenant_id())
    .bind(ids)
    .fetch_all(&db.pool)
    .await?
    .into_iter()
    .collect();
    let runs = sqlx::query_as::<_, (String, String, Option<String>, Option<String>)>(
        "SELECT r.session_id, r.colony_key, r.colony_name, l.label FROM colony_runs r
           LEFT JOIN colony_labels l ON l.tenant_id = r.tenant_id AND l.colony_key = r.colony_key
         WHERE r.tenant_id = $1 AND r.session_id = ANY($2)",
    )
    .bind(r.tenant_id())
    .bind(ids)
    .fetch_all(&db.pool)
    .await?;
    let mut links = body::TreeLinks {
        forked_from,
        ..body::TreeLinks::default()
    };
    for (session, key, name, label) in runs {
        if let Some(name) = name {
            links.colony_name.insert(session.clone(), name);
        }
        if let Some(label) = label {
            links.colony_label.insert(key.clone(), label);
        }
        links.colony_key.insert(session, key);
    }
    Ok(links)
}

/// True when the reader may see a session in, or usage for, the colony.
pub async fn colony_exists(db: &ReadDb, r: &TenantRead, colony: &str) -> Result<bool, ApiError> {
    let found: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM sessions WHERE tenant_id = $1 AND (colony_id = $2 OR session_id = $2)
                AND ($3::text IS NULL OR user_id = $3))
             OR EXISTS (SELECT 1 FROM usage_rollups WHERE tenant_id = $1 AND colony_id = $2
                AND ($3::text IS NULL OR user_id = $3))",
    )
    .bind(r.tenant_id())
    .bind(colony)
    .bind(r.user())
    .fetch_one(&db.pool)
    .await?;
    Ok(found)
}
