//! The notification outbox's claims and outcomes (`notifications`); see [`crate::alerts::deliver`].
//!
//! - A replica claims due rows with `FOR UPDATE SKIP LOCKED` and a lease (`lease_until`), bumping
//!   `attempts` in the same statement: two replicas never claim one row, and a replica that dies
//!   mid-send lets its lease lapse so another claims the row again.
//! - The attempt number fences: an outcome is recorded only while the row is still `pending` with the
//!   attempt number of the claim ([`settle`]), so a replica whose lease lapsed records nothing.
//! - Claims go tenant by tenant, each tenant's in a statement of its own: a `FOR UPDATE` over every
//!   tenant is a multi-shard query Citus refuses; one tenant's rows live on one worker.

use std::time::Duration;

use serde_json::Value;
use sqlx::PgPool;
use uuid::Uuid;

/// A claimed notification and its destination.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Claimed {
    pub tenant_id: Uuid,
    pub notification_id: String,
    /// The body as queued: sent as is.
    pub payload: Value,
    /// This claim's attempt number (the fence of [`settle`]).
    pub attempts: i32,
    /// The destination's kind, as stored.
    pub kind: String,
    pub url: String,
    pub secret: Option<String>,
}

/// Up to `limit` tenants with due, unclaimed notifications, those with the longest-due first.
pub async fn due_tenants(pool: &PgPool, limit: i64) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT tenant_id FROM notifications
         WHERE state = 'pending' AND next_attempt_at <= now()
           AND (lease_until IS NULL OR lease_until < now())
         GROUP BY tenant_id ORDER BY min(next_attempt_at), tenant_id LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await
}

/// Claims up to `limit` of the tenant's due notifications for `lease`, longest-due first.
pub async fn claim_tenant(
    pool: &PgPool,
    tenant: Uuid,
    limit: i64,
    lease: Duration,
) -> Result<Vec<Claimed>, sqlx::Error> {
    sqlx::query_as(
        "WITH due AS (
             SELECT tenant_id, notification_id FROM notifications
             WHERE tenant_id = $3 AND state = 'pending' AND next_attempt_at <= now()
               AND (lease_until IS NULL OR lease_until < now())
             ORDER BY next_attempt_at
             LIMIT $1
             FOR UPDATE SKIP LOCKED)
         UPDATE notifications n
            SET lease_until = now() + make_interval(secs => $2), attempts = n.attempts + 1
           FROM due, alert_destinations d
          WHERE n.tenant_id = $3 AND n.notification_id = due.notification_id
            AND d.tenant_id = $3 AND d.destination_id = n.destination_id
         RETURNING n.tenant_id, n.notification_id, n.payload, n.attempts, d.kind, d.url, d.secret",
    )
    .bind(limit)
    .bind(lease.as_secs_f64())
    .bind(tenant)
    .fetch_all(pool)
    .await
}

/// Where an attempt leaves a notification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Sent: never again.
    Delivered,
    /// Given up: never again.
    Dead,
    /// To be tried again after the delay.
    Pending,
}

impl Settled {
    /// The stored word.
    pub fn as_str(self) -> &'static str {
        match self {
            Settled::Delivered => "delivered",
            Settled::Dead => "dead",
            Settled::Pending => "pending",
        }
    }
}

/// Records an attempt's outcome, if the claim `c` is still the row's (same attempt number, still
/// pending): releases the lease, and sets the next attempt `delay` from now.
pub async fn settle(
    pool: &PgPool,
    c: &Claimed,
    state: Settled,
    error: Option<&str>,
    delay: Duration,
) -> Result<(), sqlx::Error> {
    // The delivery time as a choice of SQL, not a CASE around now(): Citus refuses functions that are
    // not immutable inside CASE or COALESCE on a distributed table.
    let delivered_at = if state == Settled::Delivered {
        "now()"
    } else {
        "NULL"
    };
    sqlx::query(&format!(
        "UPDATE notifications
            SET state = $4, lease_until = NULL, last_error = $5,
                next_attempt_at = now() + make_interval(secs => $6),
                delivered_at = {delivered_at}
          WHERE tenant_id = $1 AND notification_id = $2 AND attempts = $3 AND state = 'pending'"
    ))
    .bind(c.tenant_id)
    .bind(&c.notification_id)
    .bind(c.attempts)
    .bind(state.as_str())
    .bind(error)
    .bind(delay.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(())
}
