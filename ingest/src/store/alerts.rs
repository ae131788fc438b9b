//! What fired (`alerts`) and the notifications it queued (`notifications`, the outbox that
//! [`super::notifications`] delivers), and the facts the rules watch; see [`crate::alerts`].
//!
//! - An evaluation holds its tenant's transaction-scoped advisory lock ([`try_lock_tenant`]): one
//!   replica evaluates a tenant's rules at a time, and the lock goes with the transaction.
//! - An alert is one row per `(tenant, rule, episode)`: [`insert_alert`] is `ON CONFLICT DO NOTHING`,
//!   so an episode fires once however often it is seen.
//! - A notification is queued in the transaction that changed its alert, once per idempotency key
//!   (`ON CONFLICT DO NOTHING`), with its payload stored as sent: every retry sends the same bytes.
//! - Every statement names its tenant (`tenant_id = $1`).

use apiary_schema::alert::{AlertDetails, AlertNotification};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::Value;
use sqlx::types::Json;
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// Takes the tenant's evaluation lock for the rest of the transaction; false when another replica
/// holds it.
pub async fn try_lock_tenant(
    conn: &mut PgConnection,
    tenant_id: Uuid,
) -> Result<bool, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtext('apiary-alerts'), hashtext($1::text))",
    )
    .bind(tenant_id)
    .fetch_one(conn)
    .await
}

/// The episodes of the rule's firing alerts.
pub async fn firing_episodes(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule_id: &str,
) -> Result<Vec<String>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT episode FROM alerts WHERE tenant_id = $1 AND rule_id = $2 AND state = 'firing'",
    )
    .bind(tenant_id)
    .bind(rule_id)
    .fetch_all(conn)
    .await
}

/// An alert to insert, firing.
#[derive(Debug, Clone, Copy)]
pub struct NewAlert<'a> {
    pub alert_id: &'a str,
    pub rule_id: &'a str,
    /// Names the episode: the same stretch always gives the same key.
    pub episode: &'a str,
    pub subject: &'a str,
    pub summary: &'a str,
    pub details: &'a AlertDetails,
}

/// Inserts a firing alert; its firing time, or None when its episode has fired before.
pub async fn insert_alert(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    a: NewAlert<'_>,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO alerts (tenant_id, alert_id, rule_id, episode, subject, state, summary, details)
         VALUES ($1, $2, $3, $4, $5, 'firing', $6, $7)
         ON CONFLICT (tenant_id, rule_id, episode) DO NOTHING
         RETURNING fired_at",
    )
    .bind(tenant_id)
    .bind(a.alert_id)
    .bind(a.rule_id)
    .bind(a.episode)
    .bind(a.subject)
    .bind(a.summary)
    .bind(Json(a.details))
    .fetch_optional(conn)
    .await
}

/// Queues `n` for `destination_id`, stored as is (so every retry sends the same bytes to sign);
/// nothing when its idempotency key is queued already.
pub async fn queue_notification(
    conn: &mut PgConnection,
    destination_id: &str,
    n: &AlertNotification,
) -> Result<(), sqlx::Error> {
    let payload = serde_json::to_value(n).expect("a notification serialises");
    sqlx::query(
        "INSERT INTO notifications (tenant_id, notification_id, alert_id, destination_id, event,
                                    idempotency_key, payload)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (tenant_id, idempotency_key) DO NOTHING",
    )
    .bind(n.tenant_id)
    .bind(format!("nt_{}", Uuid::new_v4().simple()))
    .bind(&n.alert.alert_id)
    .bind(destination_id)
    .bind(n.event.as_str())
    .bind(&n.idempotency_key)
    .bind(payload)
    .execute(conn)
    .await?;
    Ok(())
}

/// An alert as it was resolved.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ResolvedAlert {
    pub alert_id: String,
    pub subject: String,
    pub summary: String,
    /// As the alert fired with them (written by [`insert_alert`]).
    pub details: Json<AlertDetails>,
    pub fired_at: DateTime<Utc>,
    pub resolved_at: DateTime<Utc>,
}

/// Resolves the rule's firing alerts whose episode is not in `holding`.
pub async fn resolve_alerts(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    rule_id: &str,
    holding: &[String],
) -> Result<Vec<ResolvedAlert>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE alerts SET state = 'resolved', resolved_at = now()
         WHERE tenant_id = $1 AND rule_id = $2 AND state = 'firing' AND NOT (episode = ANY($3))
         RETURNING alert_id, subject, summary, details, fired_at, resolved_at",
    )
    .bind(tenant_id)
    .bind(rule_id)
    .bind(holding)
    .fetch_all(conn)
    .await
}

/// A notification of a listed alert and how its delivery went (read from the list query's JSON, and
/// answered as is by `GET /v1/alerts`).
#[derive(Debug, Clone, Default, Deserialize, serde::Serialize, utoipa::ToSchema)]
#[serde(default)]
#[schema(as = NotificationBody)]
pub struct NotificationRow {
    pub event: String,
    pub idempotency_key: String,
    /// `pending`, `delivered` or `dead`.
    pub state: String,
    pub attempts: i32,
    pub last_error: Option<String>,
    /// When it was delivered, as Postgres writes a `timestamptz` into JSON.
    pub delivered_at: Option<String>,
}

/// A listed alert with its rule's kind and its notifications, oldest first.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AlertRow {
    pub alert_id: String,
    pub rule_id: String,
    /// The rule's kind, as stored.
    pub kind: String,
    /// `firing` or `resolved`.
    pub state: String,
    pub subject: String,
    pub summary: String,
    pub details: Value,
    pub fired_at: DateTime<Utc>,
    pub resolved_at: Option<DateTime<Utc>>,
    pub notifications: Json<Vec<NotificationRow>>,
}

/// The tenant's alerts (in `state`, when given), newest first, at most `limit`.
pub async fn list(
    pool: &PgPool,
    tenant_id: Uuid,
    state: Option<&str>,
    limit: i64,
) -> Result<Vec<AlertRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.alert_id, a.rule_id, r.kind, a.state, a.subject, a.summary, a.details, a.fired_at,
                a.resolved_at,
                COALESCE((SELECT jsonb_agg(jsonb_build_object('event', n.event,
                    'idempotency_key', n.idempotency_key, 'state', n.state, 'attempts', n.attempts,
                    'last_error', n.last_error, 'delivered_at', n.delivered_at) ORDER BY n.created_at)
                  FROM notifications n WHERE n.tenant_id = a.tenant_id AND n.alert_id = a.alert_id), '[]')
                AS notifications
         FROM alerts a JOIN alert_rules r USING (tenant_id, rule_id)
         WHERE a.tenant_id = $1 AND ($2::text IS NULL OR a.state = $2)
         ORDER BY a.fired_at DESC, a.alert_id DESC LIMIT $3",
    )
    .bind(tenant_id)
    .bind(state)
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// A threshold crossed in a budget's period.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CrossingRow {
    pub budget_id: String,
    /// The budget's name.
    pub name: Option<String>,
    /// `usd` or `tokens`.
    pub unit: String,
    pub period: String,
    pub period_start: DateTime<Utc>,
    pub period_end: DateTime<Utc>,
    pub threshold_percent: i32,
    pub spent: i64,
    pub limit_amount: i64,
    pub crossed_at: DateTime<Utc>,
}

/// Crossings of the periods not over at `now`, of `budget_id` (None: of any of the tenant's budgets),
/// by budget, period and threshold.
pub async fn current_crossings(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    budget_id: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Vec<CrossingRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT c.budget_id, b.name, b.unit, b.period, c.period_start, c.period_end,
                c.threshold_percent, c.spent, c.limit_amount, c.crossed_at
         FROM budget_crossings c JOIN budgets b USING (tenant_id, budget_id)
         WHERE c.tenant_id = $1 AND ($2::text IS NULL OR c.budget_id = $2) AND c.period_end > $3
         ORDER BY c.budget_id, c.period_start, c.threshold_percent",
    )
    .bind(tenant_id)
    .bind(budget_id)
    .bind(now)
    .fetch_all(conn)
    .await
}

/// A device's last contact and backlog.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeviceContact {
    pub device_id: String,
    pub user_id: String,
    /// The later of its last heartbeat and its last batch.
    pub heard: DateTime<Utc>,
    pub backlog_events: Option<i64>,
    pub agent_version: Option<String>,
}

/// The tenant's devices heard from since `since`, by id.
pub async fn devices_heard_since(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    since: DateTime<Utc>,
) -> Result<Vec<DeviceContact>, sqlx::Error> {
    sqlx::query_as(
        "SELECT device_id, user_id, GREATEST(last_heartbeat_at, last_seen_at) AS heard, backlog_events, agent_version
         FROM devices
         WHERE tenant_id = $1 AND GREATEST(last_heartbeat_at, last_seen_at) >= $2
         ORDER BY device_id",
    )
    .bind(tenant_id)
    .bind(since)
    .fetch_all(conn)
    .await
}

/// A device gone quiet, with the working days it was active on.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct QuietDevice {
    pub device_id: String,
    pub user_id: String,
    /// The later of its last heartbeat and its last batch.
    pub heard: DateTime<Utc>,
    /// Distinct UTC days, Monday to Friday, in `[from, to)` with usage.
    pub active_days: i64,
}

/// The tenant's devices last heard from in `[from, quiet_since)`, each with how many working days
/// (Monday to Friday, UTC) in `[from, to)` it had usage on; by id.
pub async fn quiet_devices(
    conn: &mut PgConnection,
    tenant_id: Uuid,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    quiet_since: DateTime<Utc>,
) -> Result<Vec<QuietDevice>, sqlx::Error> {
    sqlx::query_as(
        "SELECT d.device_id, d.user_id, GREATEST(d.last_heartbeat_at, d.last_seen_at) AS heard,
                (SELECT count(DISTINCT (r.bucket AT TIME ZONE 'UTC')::date) FROM usage_rollups_hourly r
                  WHERE r.tenant_id = d.tenant_id AND r.device_id = d.device_id
                    AND r.bucket >= $2 AND r.bucket < $3 AND r.events > 0
                    AND extract(isodow FROM r.bucket AT TIME ZONE 'UTC') < 6) AS active_days
         FROM devices d
         WHERE d.tenant_id = $1 AND GREATEST(d.last_heartbeat_at, d.last_seen_at) < $4
           AND GREATEST(d.last_heartbeat_at, d.last_seen_at) >= $2
         ORDER BY d.device_id",
    )
    .bind(tenant_id)
    .bind(from)
    .bind(to)
    .bind(quiet_since)
    .fetch_all(conn)
    .await
}
